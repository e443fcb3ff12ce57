"""ECS (and SDK) errors → the :mod:`providers.errors` tree.

An ECS or SDK ``Code`` maps through :data:`ERRORS`, by exact code or prefix (other HTTP 5xx
are transient, anything else a plain :class:`ProviderError`); ``SDK.HttpError`` (connection
refused, timeouts) is transient. Messages name the action, the region, ECS's code and message,
never request parameters (the ``UserData`` of RunInstances carries the agent's secrets) and
never credentials; the message of ``SignatureDoesNotMatch`` is dropped (ECS echoes the string
it signed, parameters included).
"""

from __future__ import annotations

from aliyunsdkcore.acs_exception.exceptions import ClientException, ServerException

from providers.errors import (
    AuthError,
    CapacityError,
    NotFoundError,
    ProviderError,
    QuotaError,
    TransientError,
)
from providers.regional_api import ErrorTable, error_class

PROVIDER = "aliyun"
ERRORS: ErrorTable = (
    (CapacityError, frozenset({
        "OperationDenied.NoStock", "InvalidResourceType.NotSupported", "Zone.NotOnSale",
        "Zone.NotOpen", "InstanceType.Offline", "InvalidVSwitchId.IpNotEnough",
        "ResourceNotAvailable", "InvalidSpotPriceLimit.LowerThanPublicPrice",
        "InvalidInstanceType.ZoneNotSupported", "OperationDenied.ZoneNotAllowed"}), ()),
    (QuotaError, frozenset({"Account.Arrearage", "InvalidAccountStatus.NotEnoughBalance",
                            "InstanceLimitExceeded"}),
     ("QuotaExceed", "QuotaExceeded", "OperationDenied.QuotaExceed")),
    (AuthError, frozenset({
        "SignatureDoesNotMatch", "InvalidAccessKeySecret", "IncompleteSignature",
        "InvalidTimeStamp.Expired", "InvalidTimeStamp.Format", "Abs.InvalidAccount.NotFound",
        "InvalidUserType.NotSupported", "NoPermission", "UnauthorizedOperation",
        "SDK.InvalidCredential", "SDK.GetSessionCredentialFailed"}),
     ("InvalidAccessKeyId", "InvalidSecurityToken", "Forbidden", "Forbbiden", "Forbedden")),
    (NotFoundError, frozenset({"InvalidInstanceId.NotFound", "InvalidInstanceId.MalFormed",
                               "Invalid.InstanceId.NotFound", "InvalidInstanceIds.NotFound"}), ()),
    (TransientError, frozenset({
        "ServiceUnavailable", "InternalError", "UnknownError", "SignatureNonceUsed",
        "OperationConflict", "IncorrectInstanceStatus", "LastTokenProcessing",
        "SDK.HttpError", "SDK.ServerUnreachable", "SDK.UnknownServerError"}), ("Throttling",)),
)
_SILENT_MESSAGE_CODES = frozenset({"SignatureDoesNotMatch", "IncompleteSignature"})
_MESSAGE_MAX = 400


def map_error(exc: ServerException | ClientException, action: str, region: str
              ) -> ProviderError:
    """Translate an SDK exception into the :mod:`providers.errors` tree. ``action`` is the ECS
    action (``RunInstances``), ``region`` where it was called."""
    where = f"aliyun {action} in {region}"
    if isinstance(exc, ServerException):
        code = str(exc.get_error_code() or "Unknown")
        status = int(exc.get_http_status() or 0)
        message = "" if code in _SILENT_MESSAGE_CODES else str(exc.get_error_msg() or "")
        text = f"{where}: {code}: {message[:_MESSAGE_MAX]}".rstrip(": ")
        if status:
            text += f" (HTTP {status})"
        return error_class(ERRORS, code, status)(text, provider=PROVIDER, code=code)
    code = str(exc.get_error_code() or "SDK.Unknown")
    detail = ("cannot reach the endpoint" if code == "SDK.HttpError"
              else str(exc.get_error_msg() or "")[:_MESSAGE_MAX])
    return error_class(ERRORS, code)(f"{where}: {code}: {detail}", provider=PROVIDER, code=code)
