"""What a replay says beside its figures: the notes of its preparation, of the run, and the generation cost's track
record on the public measurements nearest the replayed model and GPU kind. ``rltrace replay`` prints them; a sweep
or advise point keeps them in its row, so every view of one replay says the same."""

from __future__ import annotations

from rltrace.replay.costmodels.generation import RooflineGeneration
from rltrace.replay.costmodels.track_record import track_record, weights_precision
from rltrace.replay.run import Prepared, RunResult

from rltrace.calibration import CALIBRATION


def track_records(prepared: Prepared) -> list[str]:
    """The roofline generation's record on the public measurements nearest each job's model and GPU kind: only
    where it runs the validated defaults (a fitted trace, a profile, other efficiencies or a calibration of the
    user's own are not what was held against the measurements)."""
    generations = {(g.model.name, g.gpu.name): g for g in (job.generation for job in prepared.jobs)
                   if isinstance(g, RooflineGeneration) and g.profile is None
                   and g.calibration is CALIBRATION and (g.memory_efficiency, g.compute_efficiency)
                   == (CALIBRATION["memory_efficiency"], CALIBRATION["compute_efficiency"])}
    records = (track_record("decode", g.model, g.gpu.name, weights_precision(g.model)) for g in generations.values())
    return [f"generation cost's {record.line()}" for record in records]


def run_notes(prepared: Prepared, result: RunResult) -> list[str]:
    """Every note of one replay, each once, in the order the CLI prints them: the preparation's, the track record
    (when the preparation does not hold it already), the run's own."""
    own = [str(note) for note in result.config.get("notes", [])]
    return list(dict.fromkeys([*prepared.notes, *track_records(prepared), *own]))
