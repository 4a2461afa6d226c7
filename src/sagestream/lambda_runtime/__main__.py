"""``python -m sagestream.lambda_runtime``: the runtime's loop, as the exec wrapper starts it.

The loop runs from the importable modules, never from ``__main__``: handlers import
``sagestream.lambda_runtime`` and must catch the very ClientDisconnected class the stream raises.
"""

import sys

from sagestream.lambda_runtime.loop import main

sys.exit(main())
