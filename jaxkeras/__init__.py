"""jaxkeras: the classic Keras backend API (``keras.backend``) on JAX.

``import jaxkeras as K`` gives every backend function at top level; the optax bridge is the
submodule ``K.optimizers`` (``OptaxOptimizer``). Importing it changes no process-wide setting
of JAX, XLA, NumPy or the C library; the ones it can make for you are opt-in
(``K.process``). Multi-backend Keras 2.3.1 loads this module
as an external backend with ``KERAS_BACKEND=jaxkeras``.
"""

from jaxkeras import config as _config
from jaxkeras import (
    distribution,  # Keras 3's keras.distribution: K.distribution.DataParallel, not flat
    export,  # jax.export of a K.function or a Keras model: K.export.export, not flat
    mixed_precision,  # dtype policies: K.mixed_precision.set_global_policy, not flat
    optimizers,  # the optax bridge: K.optimizers.OptaxOptimizer, not flat
    process,  # the opt-in process-wide settings: K.process.enable_compilation_cache, not flat
    profiler,  # jax.profiler traces of compiled functions: K.profiler.trace, not flat
    tiers,  # tiered compilation's switch: K.tiers.set_tiered_compilation, not flat
)
from jaxkeras import keras2 as _keras2
from jaxkeras._engine.graph import Tensor, op
from jaxkeras.checkpoint import restore_checkpoint, save_checkpoint
from jaxkeras.checks import NarrowedDtypeWarning
from jaxkeras.compat import (
    Session,
    clear_session,
    eager,
    get_session,
    manual_variable_initialization,
    set_session,
    symbolic,
)
from jaxkeras.config import (
    epsilon,
    floatx,
    image_data_format,
    normalize_data_format,
    set_epsilon,
    set_floatx,
    set_image_data_format,
)
from jaxkeras.conv import *  # noqa: F403
from jaxkeras.ctc import *  # noqa: F403
from jaxkeras.function import Function, eval, function, gradients, stop_gradient
from jaxkeras.nn import *  # noqa: F403
from jaxkeras.ops import *  # noqa: F403
from jaxkeras.phase import (
    in_test_phase,
    in_train_phase,
    learning_phase,
    learning_phase_scope,
    set_learning_phase,
)
from jaxkeras.rnn import *  # noqa: F403
from jaxkeras.state import (
    Update,
    Variable,
    batch_get_value,
    batch_set_value,
    control_dependencies,
    count_params,
    get_state,
    get_uid,
    get_value,
    moving_average_update,
    name_scope,
    reset_uids,
    set_random_seed,
    set_state,
    set_value,
    state_scope,
    update,
    update_add,
    update_sub,
    variable,
)
from jaxkeras.tensors import (
    backend,
    constant,
    dtype,
    int_shape,
    is_keras_tensor,
    is_placeholder,
    is_sparse,
    is_tensor,
    is_variable,
    ndim,
    placeholder,
    shape,
    to_dense,
)

if _keras2.loaded_by_keras():
    _settings = _config.read_keras_json()  # Keras applied them itself; follow its settings
    _keras2.install()
else:
    _settings = _config.load_keras_json()
    _keras2.watch_for_keras()
process.apply_settings(_settings)  # only what the environment or keras.json asks for
mixed_precision.apply_settings(_settings)  # the dtype policy, when one is asked for

__version__ = "0.1.0"
