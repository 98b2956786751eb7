from typing import Generic, TypeVar

T = TypeVar("T")


class IterableDataset(Generic[T]):
    pass
