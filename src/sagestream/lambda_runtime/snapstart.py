"""SnapStart's phase of init: the before-snapshot hooks, the wait for a restore, the after-restore hooks.

A hook that fails is reported to the Runtime API with the error type Lambda's managed runtimes use:

    >>> SNAPSHOT_ERROR, RESTORE_ERROR
    ('Runtime.BeforeSnapshotError', 'Runtime.AfterRestoreError')
"""

from __future__ import annotations

import random
from typing import Any

from sagestream.lambda_runtime.client import RESTORE_ERROR, SNAPSHOT_ERROR, RuntimeAPIClient
from sagestream.lambda_runtime.logs import log


def snapshot_and_restore(client: RuntimeAPIClient) -> bool:
    """SnapStart's part of init: the before-snapshot hooks, the wait for a restore, the after-restore hooks.

    Returns whether the environment may serve; a hook that failed has been reported (and logged).
    """
    import snapshot_restore_py  # AWS's registry of hooks; only a SnapStart environment loads it here

    before: list[Any] = snapshot_restore_py.get_before_snapshot()  # (hook, args, kwargs), as registered
    after: list[Any] = [(random.seed, (), {}), *snapshot_restore_py.get_after_restore()]
    try:
        for hook, args, kwargs in reversed(before):
            hook(*args, **kwargs)
    except Exception as exc:
        log("ERROR", f"a before-snapshot hook failed: {SNAPSHOT_ERROR}", exc=exc)
        client.post_init_error(exc, SNAPSHOT_ERROR)
        return False
    client.restore_next()
    try:
        for hook, args, kwargs in after:
            hook(*args, **kwargs)
    except Exception as exc:
        log("ERROR", f"an after-restore hook failed: {RESTORE_ERROR}", exc=exc)
        client.post_restore_error(exc)
        return False
    return True
