"""Task families: each writes one healthy run of a tool-using agent into a :class:`Scenario`.

A family picks a task, a goal template (several paraphrases per language; the template id is what
the splits group on), random entities, realistic tool payloads and the answers the run can end
with: ``final_ok`` (grounded in the results), ``final_empty`` (honest: nothing found),
``final_fail`` (honest: the tool failed) and ``final_invented`` (fluent, same phrasing as
``final_ok``, but with facts the run never obtained — what a hallucination looks like).
"""

from __future__ import annotations

from collections.abc import Callable

from model.data.datagen.families.long_runs import multi_agent, research
from model.data.datagen.families.lookup import calendar, search_qa, sql_analytics, weather
from model.data.datagen.families.transactions import calc_code, retail, travel
from model.data.datagen.scenario import Scenario

FAMILIES: dict[str, Callable[[Scenario], None]] = {
    "search_qa": search_qa,
    "weather": weather,
    "travel": travel,
    "calc_code": calc_code,
    "retail": retail,
    "research": research,
    "multi_agent": multi_agent,
    "calendar": calendar,
    "sql_analytics": sql_analytics,
}


__all__ = ["FAMILIES"]
