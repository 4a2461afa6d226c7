"""Side-by-side benchmark of sagestream and the readers other proxies use: ``make bench`` (``python -m bench``)."""
