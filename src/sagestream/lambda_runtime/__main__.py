"""``python -m sagestream.lambda_runtime``: the runtime's loop, as the exec wrapper starts it.

The loop runs from the importable modules, never from ``__main__``: handlers import
``sagestream.lambda_runtime`` and must catch the very ClientDisconnected class the stream raises.
"""

import gc
import sys

# No cyclic garbage collection while the handler's modules load (botocore's among them): init makes hundreds of
# thousands of objects that live as long as the process, and each collection the allocations trigger walks them
# all again: about 5 ms of the built artifact's init CPU (3%; 16 ms where botocore parses its whole endpoints.json,
# as in a development venv). The loop freezes them and turns collection back on before the first /next
# (sagestream.lambda_runtime.loop.main).
gc.disable()

from sagestream.lambda_runtime.loop import main  # noqa: E402 (after the collector is off)

sys.exit(main())
