"""Exceptions of the binding: one class per ``cohort_status_t``, all deriving from
``CohortError``, which carries the status and ``cohort_last_error()``'s text. The
binding's own checks of its arguments raise ``InvalidArgumentError`` (a bad value) and
``ArgumentTypeError`` (a value of the wrong type) before anything reaches the library."""


class CohortError(Exception):
    """A cohort call failed.

    ``status`` is the ``cohort_status_t`` value, ``status_name`` its symbolic name
    ("COHORT_ERR_INVALID_ARGUMENT") and ``message`` what was wrong and what to do, after
    the failing function: the C function's name for the library's own text, the Python
    call ("Model.train_step") for a failure the binding found before calling it.
    ``function`` is that name."""

    status_value = None  # the status of the subclass

    def __init__(self, status, message, function=None):
        super().__init__(message)
        self.status = int(status)
        self.message = message
        self.function = function

    @property
    def status_name(self):
        return STATUS_NAMES.get(self.status, f"status {self.status}")

    def __str__(self):
        return f"{self.message} [{self.status_name}]"


class InvalidArgumentError(CohortError, ValueError):
    """A bad key, value, name, shape or pointer (COHORT_ERR_INVALID_ARGUMENT)."""


class ArgumentTypeError(InvalidArgumentError, TypeError):
    """An argument of the wrong type, found by the binding before the call: the message
    names the call, the parameter, the type it takes and the value it got. Also a
    TypeError (and, as an InvalidArgumentError, a ValueError)."""

    def __init__(self, message, function=None):
        super().__init__(1, message, function)


class InvalidStateError(CohortError):
    """The call is not allowed now (COHORT_ERR_INVALID_STATE)."""


class UnsupportedError(CohortError):
    """Valid, but this build or device cannot do it (COHORT_ERR_UNSUPPORTED)."""


class MismatchError(CohortError):
    """Ranks disagree about a collective (COHORT_ERR_MISMATCH)."""


class StalledError(CohortError, TimeoutError):
    """A collective was not submitted by every rank in time (COHORT_ERR_STALLED)."""


class CancelledError(CohortError):
    """The request was cancelled (COHORT_ERR_CANCELLED)."""


class EndOfDataError(CohortError):
    """A source has no more data (COHORT_ERR_END_OF_DATA)."""


class OutOfMemoryError(CohortError, MemoryError):
    """An allocation failed (COHORT_ERR_OUT_OF_MEMORY)."""


class CohortIOError(CohortError, OSError):
    """A file could not be opened, read or written (COHORT_ERR_IO)."""

    def __init__(self, status, message, function=None):
        CohortError.__init__(self, status, message, function)

    def __str__(self):
        return CohortError.__str__(self)


class CorruptDataError(CohortError):
    """A file or record is malformed (COHORT_ERR_CORRUPT_DATA)."""


class InternalError(CohortError):
    """A bug in cohort (COHORT_ERR_INTERNAL): please report it with the message."""


class MPIError(CohortError):
    """An MPI call failed (COHORT_ERR_MPI)."""


class PeerLostError(CohortError):
    """A rank is gone and the runtime is poisoned (COHORT_ERR_PEER_LOST)."""


class PeerShutdownError(CohortError):
    """A rank shut down its runtime without submitting this collective, most likely after
    an error of its own: look at that rank's error output (COHORT_ERR_PEER_SHUTDOWN)."""


class CUDAError(CohortError):
    """A CUDA runtime call failed (COHORT_ERR_CUDA)."""


class NCCLError(CohortError):
    """An NCCL call failed (COHORT_ERR_NCCL)."""


class CUDNNError(CohortError):
    """A cuDNN call failed (COHORT_ERR_CUDNN)."""


class CUBLASError(CohortError):
    """A cuBLAS call failed (COHORT_ERR_CUBLAS)."""


class JPEGError(CohortError):
    """libjpeg-turbo could not decode an image (COHORT_ERR_JPEG)."""


class DNNLError(CohortError):
    """A oneDNN call failed (COHORT_ERR_DNNL)."""


# cohort_status_t (common.h) → (name, class). Values are fixed and only appended.
STATUSES = {
    1: ("COHORT_ERR_INVALID_ARGUMENT", InvalidArgumentError),
    2: ("COHORT_ERR_INVALID_STATE", InvalidStateError),
    3: ("COHORT_ERR_UNSUPPORTED", UnsupportedError),
    4: ("COHORT_ERR_MISMATCH", MismatchError),
    5: ("COHORT_ERR_STALLED", StalledError),
    6: ("COHORT_ERR_CANCELLED", CancelledError),
    7: ("COHORT_ERR_END_OF_DATA", EndOfDataError),
    8: ("COHORT_ERR_PEER_SHUTDOWN", PeerShutdownError),
    100: ("COHORT_ERR_OUT_OF_MEMORY", OutOfMemoryError),
    101: ("COHORT_ERR_IO", CohortIOError),
    102: ("COHORT_ERR_CORRUPT_DATA", CorruptDataError),
    103: ("COHORT_ERR_INTERNAL", InternalError),
    200: ("COHORT_ERR_MPI", MPIError),
    201: ("COHORT_ERR_PEER_LOST", PeerLostError),
    300: ("COHORT_ERR_CUDA", CUDAError),
    301: ("COHORT_ERR_NCCL", NCCLError),
    302: ("COHORT_ERR_CUDNN", CUDNNError),
    303: ("COHORT_ERR_CUBLAS", CUBLASError),
    400: ("COHORT_ERR_JPEG", JPEGError),
    500: ("COHORT_ERR_DNNL", DNNLError),
}
STATUS_NAMES = {0: "COHORT_OK", **{value: name for value, (name, _) in STATUSES.items()}}
for _value, (_name, _cls) in STATUSES.items():
    _cls.status_value = _value


def error_from_status(status, message, function=None):
    """The exception for a failed call: the class of its status (CohortError for a
    status this binding does not know, e.g. one appended by a newer library)."""
    cls = STATUSES.get(int(status), (None, CohortError))[1]
    return cls(status, message, function)
