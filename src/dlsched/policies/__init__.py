"""Every policy module, imported once so that it registers itself. Adding a policy: write its
module under order/, allocate/, place/ or actions/, add one import line here, add its test."""
from dlsched.policies.order import fifo, remaining_work  # noqa: F401
from dlsched.policies.allocate import requested, optimus as optimus_allocate  # noqa: F401
from dlsched.policies.place import fits, first_fit  # noqa: F401
from dlsched.policies.place import tetris, resource_allocation, colocate  # noqa: F401
from dlsched.policies import profiles  # noqa: F401
from dlsched.policies.order import drf  # noqa: F401
from dlsched.policies.actions import gandiva_place  # noqa: F401
from dlsched.policies.actions import gandiva_timeslice, gandiva_pack, gandiva_migrate, gandiva_grow  # noqa: F401,E501
from dlsched.policies.place import liquid  # noqa: F401
from dlsched.policies.allocate import liquid_estimate  # noqa: F401
from dlsched.policies.actions import liquid_resize  # noqa: F401
from dlsched.policies.place import most_free  # noqa: F401
from dlsched.policies.place import tiresias_node  # noqa: F401
from dlsched.policies.actions import optimus  # noqa: F401
from dlsched.policies.allocate import pollux as pollux_allocate  # noqa: F401
from dlsched.policies.actions import pollux  # noqa: F401
from dlsched.policies.actions import liquid_batch  # noqa: F401
from dlsched.policies.actions import preempt  # noqa: F401
from dlsched.policies.order import tiresias, srtf, sjf, edf  # noqa: F401
from dlsched.policies.actions import gavel_lease  # noqa: F401
