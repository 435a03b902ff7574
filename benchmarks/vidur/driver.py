"""Run Vidur (PyPI `vidur`) on local profiling CSVs. Vidur 0.0.26 fetches its profiles from the Hugging Face
hub, which this machine cannot reach, so its one input-file lookup is replaced by the CSVs in PROFILE_DIR
(mlp.csv, attention.csv, all_reduce.csv, send_recv.csv); everything else is Vidur's own code.

Runs in Vidur's own virtual environment (benchmarks/vidur_compare.py creates it):

    .venv-vidur/bin/python benchmarks/vidur/driver.py PROFILE_DIR -- [vidur.main arguments]
"""

from __future__ import annotations

import sys

from vidur import main as vidur_main
from vidur.execution_time_predictor.sklearn_execution_time_predictor import SklearnExecutionTimePredictor


def main() -> None:
    profile, separator, *args = sys.argv[1:]
    if separator != "--":
        raise SystemExit("usage: driver.py PROFILE_DIR -- [vidur.main arguments]")

    def local_files(self: SklearnExecutionTimePredictor) -> tuple[str, str, str, str]:
        return (f"{profile}/mlp.csv", f"{profile}/attention.csv", f"{profile}/all_reduce.csv",
                f"{profile}/send_recv.csv")

    SklearnExecutionTimePredictor._get_input_files = local_files  # type: ignore[method-assign]
    sys.argv = ["vidur.main", *args]
    vidur_main.main()


if __name__ == "__main__":
    main()
