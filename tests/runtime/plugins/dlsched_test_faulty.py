"""A deliberately faulty policy for the runtime's containment tests (loaded by the server through
DLSCHED_PLUGINS): `fifo-faulty` is FIFO gang whose order key raises on jobs whose model is
"explode" (attributable to that job) and whose action raises, about no job in particular, while
a job whose model is "boom" waits."""
from dlsched.scheduler.framework import Action, Order, ProfileSpec, register, register_profile


@register("order", "faulty-order", source="tests")
class FaultyOrder(Order):
    """FIFO, except that it raises on a job whose model is 'explode'."""

    def __init__(self) -> None:
        pass

    def key(self, rec, ctx) -> tuple:
        if rec.spec.model == "explode":
            raise ValueError(f"cannot order this job (model {rec.spec.model!r})")
        return ()


@register("action", "faulty-action", source="tests")
class FaultyAction(Action):
    """Raises in every round while a job of model 'boom' waits."""

    def __init__(self) -> None:
        pass

    def act(self, ctx) -> None:
        models = {r.spec.model for r in ctx.queue}
        if "boom" in models:
            raise RuntimeError("the action failed")


register_profile(ProfileSpec(name="fifo-faulty", description="FIFO gang that raises (tests)",
                             order="faulty-order", filters=("fits",), scores=(("first_fit", 1.0),),
                             actions=("faulty-action",), gang=True, blocking=False))
