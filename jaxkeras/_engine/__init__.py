"""The engine: what turns recorded ops into compiled, state-threading calls.

Private: nothing here is a documented import path. ``graph/`` records and replays the
symbolic graph; ``store`` holds variable values (the one writer of them); ``packs`` lays out a
compiled function's state; ``ahead`` compiles a loop's other batch sizes in the background.
The public faces are :mod:`jaxkeras.state` and :mod:`jaxkeras.function`.
"""
