"""``Annotated`` dependency aliases: routes receive settings and the loaded model through these."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from model.diagnosis.diagnoser import Diagnoser
from serve.settings import Settings, get_settings


def get_diagnoser(request: Request) -> Diagnoser:
    """The :class:`Diagnoser` built once in the app's lifespan."""
    diagnoser: Diagnoser = request.app.state.diagnoser
    return diagnoser


SettingsDep = Annotated[Settings, Depends(get_settings)]
DiagnoserDep = Annotated[Diagnoser, Depends(get_diagnoser)]
