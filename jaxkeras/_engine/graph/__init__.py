"""The symbolic graph: node kinds, the one op decorator, shape inference and the interpreter.

Every op of jaxkeras is a pure ``jax.numpy``/``lax`` function wrapped by :func:`op`. Called on
concrete values it runs at once; called with a symbolic argument (a tensor or a variable) it
records a node. :func:`evaluate` replays recorded nodes in a :class:`Context` that supplies
variable values, random keys and the learning phase; the same replay runs eagerly, inside
``jax.jit`` (``K.function``) and inside ``jax.grad`` (``K.gradients``).

Modules, lowest first (each imports only those before it):

| module | holds |
| --- | --- |
| ``dtypes`` | dtype names |
| ``runtime`` | the graph layer's global state objects and the store interface |
| ``keys`` | random keys: the one derivation from seed and run |
| ``context`` | evaluation contexts and state scopes' base |
| ``sparse`` | applying an op body to values (sparse inputs, constant folding) |
| ``base`` | the graph protocol every node implements |
| ``interpret`` | the graph walk and evaluation |
| ``infer`` | shape inference |
| ``nodes`` | symbolic values, the op decorator and the nodes it records |
| ``phase`` | the learning-phase placeholder and switch |
| ``grad`` | gradient nodes |
"""

from jaxkeras._engine.graph.base import (
    ARRAY_TYPE,
    ARRAY_TYPES,
    Node,
    Subgraph,
    is_node,
    static_shape,
)
from jaxkeras._engine.graph.context import Context, active_context, active_scope, plain_eager
from jaxkeras._engine.graph.dtypes import dtype_of, standardize_dtype
from jaxkeras._engine.graph.grad import GradNode, gradient_nodes
from jaxkeras._engine.graph.infer import SHAPE_CACHE, ShapeRule, known_entries
from jaxkeras._engine.graph.interpret import evaluate, evaluate_now, topological_order
from jaxkeras._engine.graph.keys import (
    advanced_runs,
    call_key,
    derive_key,
    eager_key,
    empty_run_table,
    node_key,
    run_table,
    table_keys,
)
from jaxkeras._engine.graph.nodes import (
    ItemTensor,
    MultiOpTensor,
    OpTensor,
    Placeholder,
    Symbolic,
    Tensor,
    VariableNode,
    draw_seed,
    install_name_scopes,
    op,
    random_nodes,
    record,
    substituting,
)
from jaxkeras._engine.graph.phase import LearningPhase, PhaseSwitch, reset_learning_phase
from jaxkeras._engine.graph.runtime import (
    DISTRIBUTION,
    PHASE,
    Distributor,
    StateSource,
    install_state_source,
)
from jaxkeras._engine.graph.sparse import is_bcoo

__all__ = [
    "ARRAY_TYPE",
    "ARRAY_TYPES",
    "DISTRIBUTION",
    "PHASE",
    "SHAPE_CACHE",
    "Context",
    "Distributor",
    "GradNode",
    "ItemTensor",
    "LearningPhase",
    "MultiOpTensor",
    "Node",
    "OpTensor",
    "PhaseSwitch",
    "Placeholder",
    "ShapeRule",
    "StateSource",
    "Subgraph",
    "Symbolic",
    "Tensor",
    "VariableNode",
    "active_context",
    "active_scope",
    "advanced_runs",
    "call_key",
    "derive_key",
    "draw_seed",
    "dtype_of",
    "eager_key",
    "empty_run_table",
    "evaluate",
    "evaluate_now",
    "gradient_nodes",
    "install_name_scopes",
    "install_state_source",
    "is_bcoo",
    "is_node",
    "known_entries",
    "node_key",
    "op",
    "plain_eager",
    "random_nodes",
    "record",
    "reset",
    "reset_learning_phase",
    "run_table",
    "standardize_dtype",
    "static_shape",
    "substituting",
    "table_keys",
    "topological_order",
]


def reset() -> None:
    """Resets the graph layer's session state: the learning phase and the shape cache."""
    reset_learning_phase()
    SHAPE_CACHE.clear()
