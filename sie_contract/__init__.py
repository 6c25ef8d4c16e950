"""SIE's wire contract, torch-free: the tasks the API serves (their request fields,
answers and routes, declared once as typed structures in `shapes`), the error codes
with their HTTP statuses, and the value types that cross the wire. The engine, the
server, the router, the client and the embedded transport all read it, so none of
them keeps its own list."""

from .errors import ERROR_CODES, STATUS_BY_CODE, status_of
from .registry import all_tasks, get, names, register, unregister
from .tasks import Field, FieldError, Task
from .values import Quantized, SparseVector

__all__ = [
    "ERROR_CODES", "Field", "FieldError", "Quantized", "STATUS_BY_CODE", "SparseVector", "Task", "all_tasks", "get",
    "names", "register", "status_of", "unregister",
]
