"""torch.utils for lazyten: `lazyten.utils.data` (datasets, samplers, DataLoader)."""
from lazyten.utils import data

__all__ = ["data"]
