"""Many tenants: the queue tree (who is entitled to what) and the users who submit to it."""
from dlsched.tenancy.tree import (
    DEFAULT_QUEUE,
    QueueNode,
    QueueTree,
    Quota,
    default_tree,
    load_queues,
    tree_from_dict,
)

__all__ = ["DEFAULT_QUEUE", "QueueNode", "QueueTree", "Quota", "default_tree", "load_queues", "tree_from_dict"]
