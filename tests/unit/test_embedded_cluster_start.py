"""start_cluster starts the embedded cluster once more where Ray gave up on a node's start (its
fixed 30 s wait for the raylet to register, which a loaded CI machine once overran), and only
then: the half-started cluster is shut down first, and any other error goes to the caller.

Ray's Cluster is replaced by a recorder here: the failure is Ray's own message, which a real
start cannot be made to give on demand. tests/runtime start the real thing."""
import pytest
import ray.cluster_utils

from dlsched.runtime import cluster


class _Recorder:
    made: list = []
    fail: list = []            # the messages the next add_node calls raise, in turn

    def __init__(self, initialize_head, head_node_args):
        self.nodes, self.down = 0, False
        _Recorder.made.append(self)

    def add_node(self, **kw):
        if _Recorder.fail:
            raise Exception(_Recorder.fail.pop(0))
        self.nodes += 1

    def shutdown(self):
        self.down = True


@pytest.fixture
def recorder(monkeypatch):
    monkeypatch.setattr(ray.cluster_utils, "Cluster", _Recorder)
    monkeypatch.setenv(cluster.LOCAL_ONLY_ENV, "0")     # (start_cluster sets it: put back after)
    _Recorder.made, _Recorder.fail = [], []
    return _Recorder


def test_a_node_that_timed_out_during_startup_starts_the_cluster_again(recorder):
    recorder.fail = ["The current node timed out during startup. This could happen because ..."]
    c = cluster.start_cluster(3, 1)
    first, second = recorder.made
    assert first.down and first.nodes == 0           # the half-started one: shut down
    assert c is second and c.nodes == 3 and not c.down


def test_it_tries_twice_then_gives_the_error(recorder):
    recorder.fail = [f"node {cluster.SLOW_START}"] * 2
    with pytest.raises(Exception, match=cluster.SLOW_START):
        cluster.start_cluster(2, 1)
    assert len(recorder.made) == cluster.START_TRIES and all(c.down for c in recorder.made)


def test_any_other_error_is_not_retried(recorder):
    recorder.fail = ["object store memory too small"]
    with pytest.raises(Exception, match="object store memory"):
        cluster.start_cluster(2, 1)
    assert len(recorder.made) == 1 and recorder.made[0].down
