from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class DType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DTYPE_UNSPECIFIED: _ClassVar[DType]
    FLOAT32: _ClassVar[DType]
    FLOAT64: _ClassVar[DType]
    UINT8: _ClassVar[DType]
    UINT16: _ClassVar[DType]
    INT32: _ClassVar[DType]
    INT64: _ClassVar[DType]
    BOOL: _ClassVar[DType]
    INT8: _ClassVar[DType]
    INT16: _ClassVar[DType]
    UINT32: _ClassVar[DType]
    FLOAT16: _ClassVar[DType]

class FaultKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FAULT_KIND_UNSPECIFIED: _ClassVar[FaultKind]
    FAULT_KIND_REFLEX: _ClassVar[FaultKind]
    FAULT_KIND_TIMEOUT: _ClassVar[FaultKind]
    FAULT_KIND_NETWORK: _ClassVar[FaultKind]
    FAULT_KIND_HANG: _ClassVar[FaultKind]
    FAULT_KIND_LIMIT: _ClassVar[FaultKind]
    FAULT_KIND_CAMERA_STALL: _ClassVar[FaultKind]
    FAULT_KIND_NOT_CONNECTED: _ClassVar[FaultKind]
    FAULT_KIND_CONTACT: _ClassVar[FaultKind]
    FAULT_KIND_STOPPED: _ClassVar[FaultKind]
    FAULT_KIND_TELEOP: _ClassVar[FaultKind]
    FAULT_KIND_LOCKED: _ClassVar[FaultKind]
    FAULT_KIND_RECOVER_FAIL: _ClassVar[FaultKind]

class ErrorReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ERROR_REASON_UNSPECIFIED: _ClassVar[ErrorReason]
    ERROR_REASON_INVALID_REQUEST: _ClassVar[ErrorReason]
    ERROR_REASON_CONTROLLED_BY_OTHER: _ClassVar[ErrorReason]
    ERROR_REASON_SAFETY_LOCKED: _ClassVar[ErrorReason]
    ERROR_REASON_EPISODE_ENDED: _ClassVar[ErrorReason]
    ERROR_REASON_TOO_MANY_STREAMS: _ClassVar[ErrorReason]
    ERROR_REASON_UNAUTHENTICATED: _ClassVar[ErrorReason]
    ERROR_REASON_ENV_FAILED: _ClassVar[ErrorReason]
    ERROR_REASON_BAD_SESSION_KEY: _ClassVar[ErrorReason]
    ERROR_REASON_ROBOT_FAULT: _ClassVar[ErrorReason]
    ERROR_REASON_SAFETY_REFUSED: _ClassVar[ErrorReason]
    ERROR_REASON_SHUTTING_DOWN: _ClassVar[ErrorReason]
    ERROR_REASON_UNSUPPORTED_REQUEST: _ClassVar[ErrorReason]
    ERROR_REASON_UNKNOWN_WORLD: _ClassVar[ErrorReason]
    ERROR_REASON_WORLD_STATE: _ClassVar[ErrorReason]

class OperatorVerdict(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OPERATOR_VERDICT_UNSPECIFIED: _ClassVar[OperatorVerdict]
    OPERATOR_VERDICT_YES: _ClassVar[OperatorVerdict]
    OPERATOR_VERDICT_NO: _ClassVar[OperatorVerdict]
DTYPE_UNSPECIFIED: DType
FLOAT32: DType
FLOAT64: DType
UINT8: DType
UINT16: DType
INT32: DType
INT64: DType
BOOL: DType
INT8: DType
INT16: DType
UINT32: DType
FLOAT16: DType
FAULT_KIND_UNSPECIFIED: FaultKind
FAULT_KIND_REFLEX: FaultKind
FAULT_KIND_TIMEOUT: FaultKind
FAULT_KIND_NETWORK: FaultKind
FAULT_KIND_HANG: FaultKind
FAULT_KIND_LIMIT: FaultKind
FAULT_KIND_CAMERA_STALL: FaultKind
FAULT_KIND_NOT_CONNECTED: FaultKind
FAULT_KIND_CONTACT: FaultKind
FAULT_KIND_STOPPED: FaultKind
FAULT_KIND_TELEOP: FaultKind
FAULT_KIND_LOCKED: FaultKind
FAULT_KIND_RECOVER_FAIL: FaultKind
ERROR_REASON_UNSPECIFIED: ErrorReason
ERROR_REASON_INVALID_REQUEST: ErrorReason
ERROR_REASON_CONTROLLED_BY_OTHER: ErrorReason
ERROR_REASON_SAFETY_LOCKED: ErrorReason
ERROR_REASON_EPISODE_ENDED: ErrorReason
ERROR_REASON_TOO_MANY_STREAMS: ErrorReason
ERROR_REASON_UNAUTHENTICATED: ErrorReason
ERROR_REASON_ENV_FAILED: ErrorReason
ERROR_REASON_BAD_SESSION_KEY: ErrorReason
ERROR_REASON_ROBOT_FAULT: ErrorReason
ERROR_REASON_SAFETY_REFUSED: ErrorReason
ERROR_REASON_SHUTTING_DOWN: ErrorReason
ERROR_REASON_UNSUPPORTED_REQUEST: ErrorReason
ERROR_REASON_UNKNOWN_WORLD: ErrorReason
ERROR_REASON_WORLD_STATE: ErrorReason
OPERATOR_VERDICT_UNSPECIFIED: OperatorVerdict
OPERATOR_VERDICT_YES: OperatorVerdict
OPERATOR_VERDICT_NO: OperatorVerdict

class Tensor(_message.Message):
    __slots__ = ("dtype", "shape", "data")
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    dtype: DType
    shape: _containers.RepeatedScalarFieldContainer[int]
    data: bytes
    def __init__(self, dtype: _Optional[_Union[DType, str]] = ..., shape: _Optional[_Iterable[int]] = ..., data: _Optional[bytes] = ...) -> None: ...

class TensorSpec(_message.Message):
    __slots__ = ("name", "dtype", "shape", "low", "high")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    LOW_FIELD_NUMBER: _ClassVar[int]
    HIGH_FIELD_NUMBER: _ClassVar[int]
    name: str
    dtype: DType
    shape: _containers.RepeatedScalarFieldContainer[int]
    low: _containers.RepeatedScalarFieldContainer[float]
    high: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, name: _Optional[str] = ..., dtype: _Optional[_Union[DType, str]] = ..., shape: _Optional[_Iterable[int]] = ..., low: _Optional[_Iterable[float]] = ..., high: _Optional[_Iterable[float]] = ...) -> None: ...

class CameraInfo(_message.Message):
    __slots__ = ("name", "shape", "observation")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    OBSERVATION_FIELD_NUMBER: _ClassVar[int]
    name: str
    shape: _containers.RepeatedScalarFieldContainer[int]
    observation: str
    def __init__(self, name: _Optional[str] = ..., shape: _Optional[_Iterable[int]] = ..., observation: _Optional[str] = ...) -> None: ...

class EnvSpec(_message.Message):
    __slots__ = ("observations", "action", "control_hz", "num_envs", "robot", "cameras", "description", "autoreset")
    OBSERVATIONS_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    CONTROL_HZ_FIELD_NUMBER: _ClassVar[int]
    NUM_ENVS_FIELD_NUMBER: _ClassVar[int]
    ROBOT_FIELD_NUMBER: _ClassVar[int]
    CAMERAS_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    AUTORESET_FIELD_NUMBER: _ClassVar[int]
    observations: _containers.RepeatedCompositeFieldContainer[TensorSpec]
    action: TensorSpec
    control_hz: float
    num_envs: int
    robot: str
    cameras: _containers.RepeatedCompositeFieldContainer[CameraInfo]
    description: str
    autoreset: str
    def __init__(self, observations: _Optional[_Iterable[_Union[TensorSpec, _Mapping]]] = ..., action: _Optional[_Union[TensorSpec, _Mapping]] = ..., control_hz: _Optional[float] = ..., num_envs: _Optional[int] = ..., robot: _Optional[str] = ..., cameras: _Optional[_Iterable[_Union[CameraInfo, _Mapping]]] = ..., description: _Optional[str] = ..., autoreset: _Optional[str] = ...) -> None: ...

class Observation(_message.Message):
    __slots__ = ("tensors", "capture_time")
    class TensorsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: Tensor
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[Tensor, _Mapping]] = ...) -> None: ...
    class CaptureTimeEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: Tensor
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[Tensor, _Mapping]] = ...) -> None: ...
    TENSORS_FIELD_NUMBER: _ClassVar[int]
    CAPTURE_TIME_FIELD_NUMBER: _ClassVar[int]
    tensors: _containers.MessageMap[str, Tensor]
    capture_time: _containers.MessageMap[str, Tensor]
    def __init__(self, tensors: _Optional[_Mapping[str, Tensor]] = ..., capture_time: _Optional[_Mapping[str, Tensor]] = ...) -> None: ...

class GetSpecRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetSpecResponse(_message.Message):
    __slots__ = ("spec",)
    SPEC_FIELD_NUMBER: _ClassVar[int]
    spec: EnvSpec
    def __init__(self, spec: _Optional[_Union[EnvSpec, _Mapping]] = ...) -> None: ...

class ResetRequest(_message.Message):
    __slots__ = ("seed",)
    SEED_FIELD_NUMBER: _ClassVar[int]
    seed: int
    def __init__(self, seed: _Optional[int] = ...) -> None: ...

class ResetResponse(_message.Message):
    __slots__ = ("observation", "timing", "success")
    class TimingEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    OBSERVATION_FIELD_NUMBER: _ClassVar[int]
    TIMING_FIELD_NUMBER: _ClassVar[int]
    SUCCESS_FIELD_NUMBER: _ClassVar[int]
    observation: Observation
    timing: _containers.ScalarMap[str, float]
    success: _containers.RepeatedScalarFieldContainer[bool]
    def __init__(self, observation: _Optional[_Union[Observation, _Mapping]] = ..., timing: _Optional[_Mapping[str, float]] = ..., success: _Optional[_Iterable[bool]] = ...) -> None: ...

class StepRequest(_message.Message):
    __slots__ = ("action",)
    ACTION_FIELD_NUMBER: _ClassVar[int]
    action: Tensor
    def __init__(self, action: _Optional[_Union[Tensor, _Mapping]] = ...) -> None: ...

class StepResponse(_message.Message):
    __slots__ = ("observation", "reward", "terminated", "truncated", "success", "fault", "fault_message", "timing", "final_observation", "final_mask", "executed_action", "intervened", "operator_verdict")
    class TimingEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    OBSERVATION_FIELD_NUMBER: _ClassVar[int]
    REWARD_FIELD_NUMBER: _ClassVar[int]
    TERMINATED_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    SUCCESS_FIELD_NUMBER: _ClassVar[int]
    FAULT_FIELD_NUMBER: _ClassVar[int]
    FAULT_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    TIMING_FIELD_NUMBER: _ClassVar[int]
    FINAL_OBSERVATION_FIELD_NUMBER: _ClassVar[int]
    FINAL_MASK_FIELD_NUMBER: _ClassVar[int]
    EXECUTED_ACTION_FIELD_NUMBER: _ClassVar[int]
    INTERVENED_FIELD_NUMBER: _ClassVar[int]
    OPERATOR_VERDICT_FIELD_NUMBER: _ClassVar[int]
    observation: Observation
    reward: _containers.RepeatedScalarFieldContainer[float]
    terminated: _containers.RepeatedScalarFieldContainer[bool]
    truncated: _containers.RepeatedScalarFieldContainer[bool]
    success: _containers.RepeatedScalarFieldContainer[bool]
    fault: _containers.RepeatedScalarFieldContainer[FaultKind]
    fault_message: _containers.RepeatedScalarFieldContainer[str]
    timing: _containers.ScalarMap[str, float]
    final_observation: Observation
    final_mask: _containers.RepeatedScalarFieldContainer[bool]
    executed_action: Tensor
    intervened: _containers.RepeatedScalarFieldContainer[bool]
    operator_verdict: _containers.RepeatedScalarFieldContainer[OperatorVerdict]
    def __init__(self, observation: _Optional[_Union[Observation, _Mapping]] = ..., reward: _Optional[_Iterable[float]] = ..., terminated: _Optional[_Iterable[bool]] = ..., truncated: _Optional[_Iterable[bool]] = ..., success: _Optional[_Iterable[bool]] = ..., fault: _Optional[_Iterable[_Union[FaultKind, str]]] = ..., fault_message: _Optional[_Iterable[str]] = ..., timing: _Optional[_Mapping[str, float]] = ..., final_observation: _Optional[_Union[Observation, _Mapping]] = ..., final_mask: _Optional[_Iterable[bool]] = ..., executed_action: _Optional[_Union[Tensor, _Mapping]] = ..., intervened: _Optional[_Iterable[bool]] = ..., operator_verdict: _Optional[_Iterable[_Union[OperatorVerdict, str]]] = ...) -> None: ...

class SessionRequest(_message.Message):
    __slots__ = ("reset", "step")
    RESET_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    reset: ResetRequest
    step: StepRequest
    def __init__(self, reset: _Optional[_Union[ResetRequest, _Mapping]] = ..., step: _Optional[_Union[StepRequest, _Mapping]] = ...) -> None: ...

class Error(_message.Message):
    __slots__ = ("code", "message", "field", "reason")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    FIELD_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    code: int
    message: str
    field: str
    reason: ErrorReason
    def __init__(self, code: _Optional[int] = ..., message: _Optional[str] = ..., field: _Optional[str] = ..., reason: _Optional[_Union[ErrorReason, str]] = ...) -> None: ...

class SessionResponse(_message.Message):
    __slots__ = ("reset", "step", "error")
    RESET_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    reset: ResetResponse
    step: StepResponse
    error: Error
    def __init__(self, reset: _Optional[_Union[ResetResponse, _Mapping]] = ..., step: _Optional[_Union[StepResponse, _Mapping]] = ..., error: _Optional[_Union[Error, _Mapping]] = ...) -> None: ...

class StopRequest(_message.Message):
    __slots__ = ("release",)
    RELEASE_FIELD_NUMBER: _ClassVar[int]
    release: bool
    def __init__(self, release: _Optional[bool] = ...) -> None: ...

class StopResponse(_message.Message):
    __slots__ = ("stopped", "released", "message")
    STOPPED_FIELD_NUMBER: _ClassVar[int]
    RELEASED_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    stopped: bool
    released: bool
    message: str
    def __init__(self, stopped: _Optional[bool] = ..., released: _Optional[bool] = ..., message: _Optional[str] = ...) -> None: ...

class GetStatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class PhaseTiming(_message.Message):
    __slots__ = ("mean_s", "p50_s", "p99_s", "max_s", "count")
    MEAN_S_FIELD_NUMBER: _ClassVar[int]
    P50_S_FIELD_NUMBER: _ClassVar[int]
    P99_S_FIELD_NUMBER: _ClassVar[int]
    MAX_S_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    mean_s: float
    p50_s: float
    p99_s: float
    max_s: float
    count: int
    def __init__(self, mean_s: _Optional[float] = ..., p50_s: _Optional[float] = ..., p99_s: _Optional[float] = ..., max_s: _Optional[float] = ..., count: _Optional[int] = ...) -> None: ...

class GetStatusResponse(_message.Message):
    __slots__ = ("controller", "controller_since", "controller_last_seen", "steps", "resets", "faults", "timing", "env_status_json", "watchdog_s", "stopped", "uptime_s", "declared_observations", "declared_written", "declared_filled")
    class TimingEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: PhaseTiming
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[PhaseTiming, _Mapping]] = ...) -> None: ...
    CONTROLLER_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_SINCE_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_LAST_SEEN_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    RESETS_FIELD_NUMBER: _ClassVar[int]
    FAULTS_FIELD_NUMBER: _ClassVar[int]
    TIMING_FIELD_NUMBER: _ClassVar[int]
    ENV_STATUS_JSON_FIELD_NUMBER: _ClassVar[int]
    WATCHDOG_S_FIELD_NUMBER: _ClassVar[int]
    STOPPED_FIELD_NUMBER: _ClassVar[int]
    UPTIME_S_FIELD_NUMBER: _ClassVar[int]
    DECLARED_OBSERVATIONS_FIELD_NUMBER: _ClassVar[int]
    DECLARED_WRITTEN_FIELD_NUMBER: _ClassVar[int]
    DECLARED_FILLED_FIELD_NUMBER: _ClassVar[int]
    controller: str
    controller_since: float
    controller_last_seen: float
    steps: int
    resets: int
    faults: _containers.RepeatedScalarFieldContainer[str]
    timing: _containers.MessageMap[str, PhaseTiming]
    env_status_json: str
    watchdog_s: float
    stopped: bool
    uptime_s: float
    declared_observations: _containers.RepeatedScalarFieldContainer[str]
    declared_written: int
    declared_filled: int
    def __init__(self, controller: _Optional[str] = ..., controller_since: _Optional[float] = ..., controller_last_seen: _Optional[float] = ..., steps: _Optional[int] = ..., resets: _Optional[int] = ..., faults: _Optional[_Iterable[str]] = ..., timing: _Optional[_Mapping[str, PhaseTiming]] = ..., env_status_json: _Optional[str] = ..., watchdog_s: _Optional[float] = ..., stopped: _Optional[bool] = ..., uptime_s: _Optional[float] = ..., declared_observations: _Optional[_Iterable[str]] = ..., declared_written: _Optional[int] = ..., declared_filled: _Optional[int] = ...) -> None: ...
