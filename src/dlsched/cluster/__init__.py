"""Cluster topology (domains > racks > nodes > GPUs, links), specs, presets and state."""
from dlsched.cluster.topology import Cluster, load_cluster, cluster_from_dict, PRESETS
from dlsched.cluster.state import ClusterState, Snapshot

__all__ = ["Cluster", "load_cluster", "cluster_from_dict", "PRESETS", "ClusterState", "Snapshot"]
