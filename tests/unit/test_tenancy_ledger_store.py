"""The runtime keeps a tenancy's usage ledger in its SQLite store: a server started again on the
same store orders queues by the usage its predecessor saw (decayed usage survives a restart)."""
from dlsched.runtime.store import Store
from dlsched.tenancy import tree_from_dict
from dlsched.tenancy.engine import Tenancy

TREE = {"tenancy": {"mode": "kai"}, "queues": [{"name": "a"}, {"name": "b"}]}


def test_the_ledger_survives_a_restart(tmp_path):
    store = Store(tmp_path / "dlsched.db")
    t = Tenancy(tree_from_dict(TREE))
    t.keep_in(store, every_s=0.0)
    led = t.mode.ledger
    led.capacity = 8.0
    led.advance(0.0, {})
    led.advance(3600.0, {"queue:a": 6.0, "user:alice": 6.0})
    t._save(3600.0)
    before = led.value("queue:a")
    assert before > 0 and led.value("queue:b") == 0
    again = Tenancy(tree_from_dict(TREE))       # a new server on the same store
    again.keep_in(Store(tmp_path / "dlsched.db"))
    assert again.mode.ledger.value("queue:a") == before and again.mode.ledger.state() == led.state()
