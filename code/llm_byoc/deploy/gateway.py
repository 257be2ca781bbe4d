"""Every AWS call goes through one gateway, so ``--dry-run`` can print them all.

``AwsGateway.call("sagemaker", "create_model", **params)`` runs the boto3
operation and turns botocore failures into one-line ``DeployError``s.
``DryRunGateway`` prints ``{"service", "operation", "params"}`` as JSON and
returns an empty response, so every command walks its whole plan and makes
no call at all (not even reads).
"""

from __future__ import annotations

import json
import sys
from typing import Any, Callable, TextIO

import boto3
from boto3.exceptions import S3UploadFailedError
from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError, NoRegionError

from .errors import AwsCallError, DeployError

NO_CREDENTIALS = (
    "no AWS credentials found: set AWS_PROFILE or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, or run `aws configure`"
)
NO_REGION = "no AWS region: pass --region or set AWS_REGION (or AWS_DEFAULT_REGION)"
DRY_RUN_ACCOUNT = "123456789012"  # stands in for the account id in dry-run output


class AwsGateway:
    dry_run = False

    def __init__(self, session: boto3.session.Session, clients: dict[str, Any] | None = None):
        if not session.region_name:
            raise DeployError(NO_REGION)
        self.session = session
        self.region: str = session.region_name
        self._clients: dict[str, Any] = dict(clients or {})
        self._account: str | None = None

    def client(self, service: str) -> Any:
        if service not in self._clients:
            if self.session.get_credentials() is None:
                raise DeployError(NO_CREDENTIALS)
            self._clients[service] = self.session.client(service)
        return self._clients[service]

    def call(self, service: str, operation: str, **params: Any) -> dict:
        try:
            return getattr(self.client(service), operation)(**params)
        except ClientError as exc:
            error = exc.response.get("Error", {})
            raise AwsCallError(service, operation, error.get("Code", "Error"), error.get("Message", str(exc))) from None
        except NoCredentialsError:
            raise DeployError(NO_CREDENTIALS) from None
        except NoRegionError:
            raise DeployError(NO_REGION) from None
        except BotoCoreError as exc:
            raise DeployError(f"{service}.{operation} failed: {exc}") from None

    def account_id(self) -> str:
        if self._account is None:
            self._account = self.call("sts", "get_caller_identity").get("Account") or DRY_RUN_ACCOUNT
        return self._account

    def upload_file(self, path: str, bucket: str, key: str, callback: Callable[[int], None]) -> None:
        """S3 managed transfer (multipart for big files) with a progress callback."""
        try:
            self.client("s3").upload_file(path, bucket, key, Callback=callback)
        except (ClientError, S3UploadFailedError) as exc:
            raise DeployError(f"upload of {path} to s3://{bucket}/{key} failed: {exc}") from None
        except NoCredentialsError:
            raise DeployError(NO_CREDENTIALS) from None
        except BotoCoreError as exc:  # connection failures and the like
            raise DeployError(f"upload of {path} to s3://{bucket}/{key} failed: {exc}") from None


class DryRunGateway(AwsGateway):
    dry_run = True

    def __init__(self, session: boto3.session.Session, out: TextIO | None = None):
        super().__init__(session)
        self.out = out or sys.stdout
        self.calls: list[dict] = []

    def call(self, service: str, operation: str, **params: Any) -> dict:
        self._print({"service": service, "operation": operation, "params": params})
        return {}

    def upload_file(self, path: str, bucket: str, key: str, callback: Callable[[int], None]) -> None:
        self._print(
            {"service": "s3", "operation": "upload_file", "params": {"Filename": path, "Bucket": bucket, "Key": key}}
        )

    def _print(self, record: dict) -> None:
        self.calls.append(record)
        print(json.dumps({"dry_run": True, "region": self.region, **record}, default=str), file=self.out, flush=True)


def make_gateway(region: str | None, profile: str | None, dry_run: bool, out: TextIO | None = None) -> AwsGateway:
    try:
        session = boto3.session.Session(region_name=region, profile_name=profile)
    except BotoCoreError as exc:  # ProfileNotFound
        raise DeployError(str(exc)) from None
    return DryRunGateway(session, out) if dry_run else AwsGateway(session)


def delete_quietly(gateway: AwsGateway, operation: str, **params: Any) -> None:
    """A SageMaker clean-up that must not hide the error that triggered it (or stop a delete half-way)."""
    try:
        gateway.call("sagemaker", operation, **params)
    except AwsCallError as exc:
        print(f"warning: {exc}", file=sys.stderr)
