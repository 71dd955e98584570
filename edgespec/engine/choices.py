"""What the front ends need of decoding besides the events they render, named where they find it:
the drafter (`DraftChoice`), the draft length (`KSetting`), the sampling rule (`sampling_problem`
checks a value, `sampling_from_flags` lays the values given over a pair's defaults), the drafters
whose drafts are copied from beyond the reply's own text (`FROM_ELSEWHERE`, coloured apart), and
the error of a reply whose constraint left no token to write (`ConstraintDeadEnd`).

They are defined in `edgespec.decoding`, where the loop reads them; front ends take them from here,
so that of decoding they import only the events. A light module: a command's flags are declared
with these at import, before anything else of the engine is needed.
"""

from edgespec.decoding.constraint import ConstraintDeadEnd
from edgespec.decoding.drafters import FROM_ELSEWHERE, DraftChoice
from edgespec.decoding.policy.plan import KSetting
from edgespec.decoding.sampling import sampling_from_flags, sampling_problem

__all__ = ["FROM_ELSEWHERE", "ConstraintDeadEnd", "DraftChoice", "KSetting", "sampling_from_flags", "sampling_problem"]
