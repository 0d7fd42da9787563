"""The optax bridge: any optax ``GradientTransformation`` as Keras 2 optimizer updates.

:class:`OptaxOptimizer` implements the Keras 2 optimizer protocol (``get_updates(loss,
params)`` returning K updates, ``weights``, ``get_weights``/``set_weights``, ``get_config``).
Its state (the step count ``iterations`` and every leaf of the optax state) lives in
``K.variable`` s, so ``K.function``, ``f.pure``, ``K.get_state``, state scopes and checkpoints
carry it like any other variable. The optax update itself is one multi-output graph op over the
gradients, the state variables and the params; an optax schedule reads the step count kept in
that state, so it sees the right step on every call.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import optax

from jaxkeras._engine import graph
from jaxkeras._ops.reduce import sum as sum_
from jaxkeras.checks import check_variable
from jaxkeras.function import gradients
from jaxkeras.state import (
    Variable,
    batch_set_value,
    get_state,
    get_value,
    name_scope,
    update,
    update_add,
    variable,
)

__all__ = ["OptaxOptimizer"]


class OptaxOptimizer:
    """An optax ``GradientTransformation`` as a Keras 2 optimizer.

    ``get_updates(loss, params)`` returns K updates for ``K.function(..., updates=...)``; the
    same object passed to multi-backend Keras 2.3.1's ``model.compile(optimizer=...)`` trains the
    model (when Keras loads jaxkeras, ``keras.optimizers.get`` accepts it).

    The optimizer's state is created by the first :meth:`get_updates` call, from the params'
    stored values (``tx.init``); later calls with the same params reuse it, so a function compiled
    again (or a step traced again under ``jax.jit``) continues where it was. A call with other
    params starts a fresh state for them, as Keras 2 optimizers do.

    Params whose gradient is ``None`` (the loss does not depend on them) are held fixed: the
    transform sees a zero gradient for them, so pytree-shaped transform arguments (``optax.masked``
    masks, ``optax.multi_transform`` labels) keep matching the params list, and their update is
    dropped. A param's ``constraint`` is applied to its new value, as in Keras 2.

    Keras learning-rate callbacks (``LearningRateScheduler``, ``ReduceLROnPlateau``) need an
    ``lr`` variable, which an optax transform does not have: use an optax schedule (or
    ``optax.inject_hyperparams``) instead.

    Gradient accumulation: ``OptaxOptimizer(optax.MultiSteps(optax.adam(1e-3),
    every_k_schedule=k))`` (or its ``.gradient_transformation()``) averages the gradients of ``k``
    calls and changes the params on every ``k``-th call only (the others leave them as they
    are). ``iterations`` counts calls (mini-steps), as Keras 2 increments it once per batch;
    the optimizer steps taken are ``optax_state().gradient_step``. To accumulate within one
    call instead (one compiled call over ``k`` micro-batches), see ``K.function``'s
    ``micro_batches``.

    Args:
        tx: the optax transform, e.g. ``optax.adam(1e-3)``, or an ``optax.MultiSteps``.
        name: the name scope of the optimizer's variables.

    Attributes:
        tx: the transform, as given.
        iterations: an int32 variable counting the calls of the train step (under
            ``optax.MultiSteps``, its mini-steps).
        updates: the updates of the last :meth:`get_updates` call.

    Example:
        >>> w = K.variable([1.0, -2.0])
        >>> loss = K.sum(K.square(w))
        >>> opt = K.optimizers.OptaxOptimizer(optax.sgd(0.25))
        >>> train = K.function([], [loss], updates=opt.get_updates(loss, [w]))
        >>> loss_before_step = train([])
        >>> K.get_value(w)  # w - 0.25 * 2w
        array([ 0.5, -1. ], dtype=float32)
    """

    def __init__(
        self, tx: optax.GradientTransformation | optax.MultiSteps, name: str = "optax"
    ) -> None:
        if isinstance(tx, optax.MultiSteps):
            # its update takes the loss as an extra argument, for the transform it wraps
            transform = optax.GradientTransformationExtraArgs(tx.init, tx.update)
        elif isinstance(tx, optax.GradientTransformation):
            transform = tx
        else:
            raise TypeError(
                f"OptaxOptimizer: tx must be an optax GradientTransformation (e.g. "
                f"optax.adam(1e-3)) or an optax.MultiSteps, got {tx!r}"
            )
        if not isinstance(name, str) or not name:
            raise ValueError(f"OptaxOptimizer: name must be a non-empty string, got {name!r}")
        self.tx = tx
        self._transform = transform
        self.name = name
        with name_scope(name):
            self.iterations = variable(0, dtype="int32", name="iterations", trainable=False)
        self.updates: list[Any] = []
        self._params: tuple[str, ...] | None = None
        self._state: list[Variable] = []
        self._treedef: Any = None

    # state -------------------------------------------------------------------------------------

    @property
    def weights(self) -> list[Variable]:
        """The optimizer's variables: ``iterations``, then each leaf of the optax state."""
        return [self.iterations, *self._state]

    def get_weights(self) -> list[Any]:
        """Returns the current values of :attr:`weights` as NumPy arrays.

        Returns:
            A list of arrays, in the order of :attr:`weights`.
        """
        return [get_value(w) for w in self.weights]

    def set_weights(self, weights: Sequence[Any]) -> None:
        """Sets the values of :attr:`weights` (as returned by :meth:`get_weights`).

        Args:
            weights: one array per variable of :attr:`weights`, of its shape.

        Raises:
            ValueError: when the number of arrays or a shape does not match; nothing is set.
        """
        if len(weights) != len(self.weights):
            raise ValueError(
                f"OptaxOptimizer.set_weights: expected {len(self.weights)} arrays (for "
                f"{[w.name for w in self.weights]}), got {len(weights)}"
            )
        batch_set_value(list(zip(self.weights, weights)))

    def optax_state(self, values: dict[str, Any] | None = None) -> Any:
        """Returns the optax state pytree, as ``tx.update`` sees it.

        Args:
            values: a state dict (variable name -> value, as from ``f.pure`` or a state
                scope) to read the state from; default the stored values.

        Returns:
            The optax state, or ``None`` before the first :meth:`get_updates` call.
        """
        if self._treedef is None:
            return None
        if values is None:
            values = get_state(self._state)
        return jax.tree_util.tree_unflatten(self._treedef, [values[v.name] for v in self._state])

    def _build(self, params: list[Variable]) -> None:
        """Creates the optax state variables for ``params`` from their stored values."""
        names = tuple(p.name for p in params)
        if names == self._params:
            return
        stored = get_state(params)
        # concrete even when traced inside jax.jit; optax's own code under standard promotion
        with jax.ensure_compile_time_eval(), jax.numpy_dtype_promotion("standard"):
            state = self._transform.init([stored[n] for n in names])
        paths, treedef = jax.tree_util.tree_flatten_with_path(state)
        with name_scope(self.name):
            leaves = [
                variable(
                    leaf,
                    dtype=jnp.asarray(leaf).dtype.name,
                    name=_leaf_name(path, leaf, params),
                    trainable=False,
                )
                for path, leaf in paths
            ]
        self._params, self._state, self._treedef = names, leaves, treedef

    # the Keras 2 protocol ----------------------------------------------------------------------

    def get_gradients(self, loss: Any, params: Sequence[Variable]) -> list[Any]:
        """Returns ``K.gradients(loss, params)`` (``None`` where the loss does not depend on a
        param).

        Args:
            loss: a scalar tensor.
            params: the variables.

        Returns:
            A list of gradient tensors (or ``None``).
        """
        return gradients(loss, list(params))

    def get_updates(self, loss: Any, params: Sequence[Variable]) -> list[Any]:
        """Returns the updates of one optimizer step on ``params`` minimizing ``loss``.

        The gradients are ``K.gradients(loss, params)``; the optax update runs as one graph op.
        Transforms that take extra arguments get the loss as ``value`` (summed when it is not a
        scalar), so ``optax.contrib.reduce_on_plateau`` works.
        Inside a state scope the updates apply at once, to the scope (``loss`` must then be a
        symbolic tensor built outside the scope, from variables, without placeholders).

        Args:
            loss: the scalar loss tensor.
            params: the variables to train.

        Returns:
            A list of K updates: ``iterations + 1``, each param's and each state variable's new
            value (inside a state scope, the new values, already applied).

        Raises:
            TypeError: when ``params`` is not a list of variables, or ``loss`` is not a
                symbolic tensor while ``params`` is not empty.
        """
        if isinstance(params, Variable):
            params = [params]
        if not isinstance(params, (list, tuple)):
            raise TypeError(
                f"OptaxOptimizer.get_updates: params must be a list of variables, got {params!r}"
            )
        params = [check_variable("OptaxOptimizer.get_updates", "params", p) for p in params]
        if params and not isinstance(loss, graph.Symbolic):
            raise TypeError(
                "OptaxOptimizer.get_updates: loss must be a symbolic tensor that depends on the "
                f"params (inside a state scope, build it outside the scope), got {loss!r}"
            )
        self._build(params)
        grads = self.get_gradients(loss, params) if params else []
        value = loss if graph.static_shape(loss) == () else sum_(loss)
        step = _optax_step(self._transform, self._treedef)
        new_params, new_state = step(grads, self._state, params, value)
        updates = [update_add(self.iterations, 1)]
        for p, g, new_p in zip(params, grads, new_params):
            if g is not None:
                constraint = getattr(p, "constraint", None)
                updates.append(update(p, new_p if constraint is None else constraint(new_p)))
        updates.extend(update(v, new_v) for v, new_v in zip(self._state, new_state))
        self.updates = updates
        return updates

    def get_config(self) -> dict[str, Any]:
        """Returns the optimizer's config: only its name.

        An optax transform is a pair of closures, which cannot be serialized, so a saved Keras
        model records the class name and this config, and :meth:`from_config` cannot rebuild
        the transform (see there).

        Returns:
            ``{"name": name}``.
        """
        return {"name": self.name}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> OptaxOptimizer:
        """Raises: an optax transform cannot be rebuilt from a config.

        To load a Keras model saved with an ``OptaxOptimizer``, either pass
        ``custom_objects={"OptaxOptimizer": lambda **config: OptaxOptimizer(tx, **config)}``
        to ``keras.models.load_model`` (the saved optimizer state is then restored into the new
        optimizer when ``tx`` has the same state structure), or load with ``compile=False`` and
        compile again.

        Args:
            config: a config from :meth:`get_config`.

        Raises:
            TypeError: always.
        """
        raise TypeError(
            f"OptaxOptimizer.from_config: an optax transform cannot be rebuilt from config "
            f"{config!r}; pass custom_objects={{'OptaxOptimizer': lambda **config: "
            "OptaxOptimizer(tx, **config)}} to load_model, or load with compile=False"
        )

    def __repr__(self) -> str:
        return f"<OptaxOptimizer {self.name!r} with {len(self._state)} state variables>"


def _optax_step(tx: optax.GradientTransformation, treedef: Any) -> Any:
    """The op applying ``tx`` once: ``(grads, state_leaves, params, value) -> (new_params,
    new_state_leaves)``; ``None`` gradients count as zeros, and ``value`` (the loss) is passed
    to transforms that take extra arguments."""
    extra_args = isinstance(tx, optax.GradientTransformationExtraArgs)

    def optax_step(grads: list, state_leaves: list, params: list, value: Any) -> tuple:
        grads = [jnp.zeros_like(p) if g is None else g for g, p in zip(grads, params)]
        state = jax.tree_util.tree_unflatten(treedef, state_leaves)
        # optax's transforms mix dtypes (an int32 step count with float decay rates): they run
        # under standard promotion whatever the caller's, so strict promotion does not break them
        with jax.numpy_dtype_promotion("standard"):
            if extra_args:
                steps, new_state = tx.update(grads, state, params, value=value)
            else:
                steps, new_state = tx.update(grads, state, params)
            return optax.apply_updates(params, steps), jax.tree_util.tree_leaves(new_state)

    return graph.op(optax_step, name="optax_step")


def _leaf_name(path: Any, leaf: Any, params: list[Variable]) -> str:
    """The variable name of the optax state leaf at ``path``.

    A leaf that mirrors a param (its path ends at the param's index in the params list, and it
    has the param's shape, as Adam's ``mu`` and ``nu`` do) is named after the param:
    ``state/0/mu/dense_1/kernel``, so a distribution's layout map places it like the param.
    Other leaves are named by their path: ``state/0/count``.
    """
    *head, last = path
    if isinstance(last, jax.tree_util.SequenceKey) and last.idx < len(params):
        param = params[last.idx]
        if tuple(jnp.shape(leaf)) == tuple(param.shape):
            prefix = jax.tree_util.keystr(tuple(head), simple=True, separator="/")
            return f"state/{prefix}/{param.name}" if prefix else f"state/{param.name}"
    keys = jax.tree_util.keystr(path, simple=True, separator="/")
    return f"state/{keys}" if keys else "state"
