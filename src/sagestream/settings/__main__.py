"""``python -m sagestream.settings PAGE``: rewrite PAGE's settings table (:func:`sagestream.settings.main`)."""

import sys

from sagestream.settings import main

raise SystemExit(main(sys.argv[1:]))
