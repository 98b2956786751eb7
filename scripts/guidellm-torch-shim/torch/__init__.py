"""Stand-in for the few torch names GuideLLM 0.8.1's only data loader imports
(guidellm/data/loaders/torch.py): one process, batch size 1, prompts in order.
torch itself is too heavy to install here; nothing GuideLLM measures goes through this."""
from . import utils  # noqa: F401


class Generator:
    def manual_seed(self, seed):
        self.seed = seed
        return self


class Tensor:  # `datasets` tests isinstance(value, torch.Tensor) when it finds a torch
    pass
