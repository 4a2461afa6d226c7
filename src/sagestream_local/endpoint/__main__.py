"""``python -m sagestream_local.endpoint``: the simulated endpoint on its own, its scenario from flags."""

from __future__ import annotations

import argparse
import dataclasses
import threading

import sagestream_local.endpoint
from sagestream_local.endpoint.scenario import CHOICES, Scenario
from sagestream_local.endpoint.server import SimulatedEndpoint


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m sagestream_local.endpoint", description=(sagestream_local.endpoint.__doc__ or "").split("\n")[0]
    )
    parser.add_argument("--port", type=int, default=8089)
    defaults = Scenario()
    for f in dataclasses.fields(Scenario):
        value = getattr(defaults, f.name)
        if isinstance(value, str | int | float) and not isinstance(value, bool):
            choices = CHOICES.get(f.name)
            parser.add_argument(f"--{f.name.replace('_', '-')}", type=type(value), default=value, choices=choices)
    args = vars(parser.parse_args(argv))
    port = args.pop("port")
    sim = SimulatedEndpoint(Scenario(**args), port=port).start()
    print(
        f"simulated SageMaker endpoint at {sim.url}  (AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME={sim.url})",
        flush=True,
    )
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        sim.stop()


if __name__ == "__main__":
    main()
