"""Stand-in for opentelemetry.trace.status (opentelemetry-api 1.x): StatusCode and Status, whose
description is kept only with ERROR (a warning is logged otherwise, as the real one does)."""

import enum
import logging
from typing import Optional

logger = logging.getLogger(__name__)


class StatusCode(enum.Enum):
    UNSET = 0
    OK = 1
    ERROR = 2


class Status:
    def __init__(self, status_code: StatusCode = StatusCode.UNSET,
                 description: Optional[str] = None):
        self._status_code = status_code
        self._description = None
        if description:
            if not isinstance(description, str):
                logger.warning("Invalid status description type, expected str")
                return
            if status_code is not StatusCode.ERROR:
                logger.warning("description should only be set when status_code is set to "
                               "StatusCode.ERROR")
                return
        self._description = description

    @property
    def status_code(self) -> StatusCode:
        return self._status_code

    @property
    def description(self) -> Optional[str]:
        return self._description

    @property
    def is_ok(self) -> bool:
        return self.is_unset or self._status_code is StatusCode.OK

    @property
    def is_unset(self) -> bool:
        return self._status_code is StatusCode.UNSET
