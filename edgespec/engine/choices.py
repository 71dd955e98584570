"""The engine's choices as the front ends name them: the drafter (`DraftChoice`), the draft length
(`KSetting`), the rule every sampling value is checked by (`sampling_problem`), and the drafters
whose drafts are copied from beyond the reply's own text (`FROM_ELSEWHERE`, which front ends colour
apart).

They are defined in `edgespec.decoding`, where the loop reads them; front ends take them from here,
so that of decoding they import only the events they render. A light module: a command's flags are
declared with these at import, before anything else of the engine is needed.
"""

from edgespec.decoding.drafters import FROM_ELSEWHERE, DraftChoice
from edgespec.decoding.plan import KSetting
from edgespec.decoding.sampling import sampling_problem

__all__ = ["FROM_ELSEWHERE", "DraftChoice", "KSetting", "sampling_problem"]
