from typing import Generic, TypeVar

T = TypeVar("T")


class DataLoader(Generic[T]):
    """torch's DataLoader as GuideLLM uses it (one worker, batch size 1, collate_first), in the
    calling process: the same items in the same order as torch's one worker."""

    def __init__(self, dataset, batch_size=1, shuffle=None, collate_fn=None,
                 num_workers=0, prefetch_factor=None, generator=None, **kwargs):
        self.dataset = dataset
        self.collate_fn = collate_fn or (lambda b: b)

    def __iter__(self):
        for item in self.dataset:
            yield self.collate_fn([item])
