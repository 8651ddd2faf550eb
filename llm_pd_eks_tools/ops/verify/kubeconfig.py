"""A kubeconfig's current context, credentials and TLS trust, read by the official `kubernetes` package.

`kubernetes.config.kube_config.KubeConfigLoader` picks the current context, its cluster and user, and
the user's credentials in its order (auth-provider, token or tokenFile, exec plugin, basic auth);
it writes certificate-authority-data and client certificates to files it removes at exit, and it
installs `Configuration.refresh_api_key_hook`, which re-runs an exec plugin (`aws eks get-token`)
once its token's `expirationTimestamp` is within five minutes. Its REST client is not used
(kube.py says why). Changed here, in subclasses of its loader and exec provider:

- the exec plugin: the library runs the command with no timeout (`Popen().communicate()`), so a
  hung credential command (a login prompt, a metadata endpoint that never answers) would hang
  verify past its deadline. `DeadlineExec.run` runs it through `process_safety.run_process` within
  one request's time, cut to what is left of the run (the process group is killed on timeout). The library
  logs a failed plugin and carries on without credentials (every request is then a 401); here the
  failure is raised as one line that names the command;
- the types the library takes on trust: a `token` that is not a string, an
  `insecure-skip-tls-verify` that is not true or false (`"false"` would turn verification off), a
  cluster without `server` (the library falls back to http://localhost).

"""

from __future__ import annotations

import binascii
import json
import ssl
import subprocess
from typing import Any, Callable, Optional

from kubernetes.client import Configuration
from kubernetes.config.config_exception import ConfigException
from kubernetes.config.dateutil import parse_rfc3339
from kubernetes.config.exec_provider import ExecProvider
from kubernetes.config.kube_config import KubeConfigLoader

from llm_pd_eks_tools.core import secrets
from llm_pd_eks_tools.core.cli import Exit, ToolError, one_line
from llm_pd_eks_tools.core.io_safety import redact
from llm_pd_eks_tools.core.process_safety import run_process

# Where KubeConfigLoader._set_config keeps the Authorization value ("Bearer <token>", "Basic <...>").
AUTHORIZATION_KEY = "BearerToken"


def bad_kubeconfig(why: str) -> ToolError:
    """What is wrong with the kubeconfig, on one line with what to do about it."""
    return ToolError(Exit.USAGE, f"not a usable kubeconfig: {why}; fix the file or give another with --kubeconfig")


class DeadlineExec(ExecProvider):
    """The library's exec plugin (its __init__ reads the spec: `command`, `args`, `env` entries with
    `name` and `value`, `apiVersion`, `provideClusterInfo`), run within `timeout()` seconds."""

    def __init__(self, spec: Any, cwd: str, cluster: Any, timeout: Callable[[], float]):
        super().__init__(spec, cwd, cluster)
        self.timeout = timeout

    def run(self, previous_response: Any = None) -> dict[str, Any]:
        """The ExecCredential's `status` (with a string `token`), as the library's `run` checks it."""
        name = str(self.args[0])
        spec: dict[str, Any] = {"interactive": False}  # stdin is /dev/null: the plugin must not prompt
        if self.cluster:
            spec["cluster"] = self.cluster.value
        info = {"apiVersion": self.api_version, "kind": "ExecCredential", "spec": spec}
        env = dict(self.env, KUBERNETES_EXEC_INFO=json.dumps(info))
        try:
            timeout = self.timeout()
        except TimeoutError as exc:
            raise ToolError(Exit.UNVERIFIED, f"kubeconfig credential command {name!r} not run: {exc}") from None
        try:
            result = run_process([str(a) for a in self.args], timeout, env=env, cwd=self.cwd)
        except subprocess.TimeoutExpired:
            raise ToolError(
                Exit.UNVERIFIED,
                f"kubeconfig credential command {name!r} did not answer in {timeout:.0f}s and was stopped; "
                "run it by hand to see what it waits for (a login, a network call)",
            ) from None
        except OSError as exc:
            raise ToolError(Exit.UNVERIFIED, f"kubeconfig credential command {name!r} failed: {exc}") from None
        if result.returncode != 0:
            raise ToolError(
                Exit.UNVERIFIED,
                secrets.child_failure(f"kubeconfig credential command {name!r}", result.returncode, result.stderr),
            )
        try:
            reply = json.loads(result.stdout)
            secrets.register(reply.get("status") if isinstance(reply, dict) else None)
            status = reply["status"]
            if reply["apiVersion"] != self.api_version or not isinstance(status["token"], str):
                raise ValueError("not this apiVersion, or a token that is not a string")
        except (ValueError, KeyError, TypeError):
            raise ToolError(
                Exit.UNVERIFIED,
                f"credential command {name!r} printed no {self.api_version} ExecCredential token "
                "(verify authenticates with tokens)",
            ) from None
        return dict(status)


class Loader(KubeConfigLoader):
    """KubeConfigLoader with the exec plugin under a deadline and the checks the module docstring lists."""

    def __init__(self, config: Any, timeout: Callable[[], float]):
        super().__init__(config_dict=config, config_base_path="")  # relative paths: from the working directory
        self.exec_timeout = timeout

    def _load_from_exec_plugin(self) -> Optional[bool]:
        if "exec" not in self._user:
            return None
        try:
            plugin = DeadlineExec(self._user["exec"], "", self._cluster, self.exec_timeout)
        except (KeyError, TypeError, AttributeError) as exc:  # an `env` entry that is not a mapping
            raise ConfigException(f"the user's exec entry is malformed ({type(exc).__name__}: {exc})") from None
        status = plugin.run()
        self.token = f"Bearer {status['token']}"
        if "expirationTimestamp" in status:
            try:
                self.expiry = parse_rfc3339(status["expirationTimestamp"])
            except (ValueError, TypeError, AttributeError):
                raise ToolError(
                    Exit.UNVERIFIED,
                    f"credential command {plugin.args[0]!r} printed an expirationTimestamp that is not RFC 3339",
                ) from None
        return True

    def _load_user_token(self) -> Optional[bool]:
        if not isinstance(self._user.safe_get("token") or "", str):
            raise ConfigException("the user's token is not a string")
        return bool(super()._load_user_token())

    def _load_cluster_info(self) -> None:
        self._cluster["server"]  # raises ConfigException naming the cluster without one
        if not isinstance(self._cluster.safe_get("insecure-skip-tls-verify") or False, bool):
            raise ConfigException("the cluster's insecure-skip-tls-verify is not true or false")
        super()._load_cluster_info()


def load(config: Any, timeout: Callable[[], float]) -> tuple[Configuration, Optional[ssl.SSLContext]]:
    """The library's Configuration for the current context (host, TLS files, the Authorization value and
    its refresh hook) and the TLS context the requests use (None for an http:// server)."""
    configuration = Configuration()
    try:
        Loader(config, timeout).load_and_set(configuration)
    except ConfigException as exc:
        raise bad_kubeconfig(one_line(redact(str(exc)), 160)) from None
    except binascii.Error:  # FileOrData decodes *-data fields with base64.standard_b64decode
        raise bad_kubeconfig(
            "certificate-authority-data, client-certificate-data or client-key-data is not base64"
        ) from None
    except (KeyError, TypeError, AttributeError, ValueError, IndexError) as exc:  # entries of the wrong type
        raise bad_kubeconfig(f"{type(exc).__name__}: {one_line(redact(str(exc)), 120)}") from None
    return configuration, tls_context(configuration)


def tls_context(configuration: Configuration) -> Optional[ssl.SSLContext]:
    """Trust and client identity from the library's Configuration: its CA file (from certificate-authority
    or the data written out), `verify_ssl` (insecure-skip-tls-verify), a client certificate and key."""
    if not str(configuration.host).startswith("https"):
        return None
    context = ssl.create_default_context()
    try:
        if configuration.verify_ssl is False:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        elif configuration.ssl_ca_cert:
            context.load_verify_locations(cafile=configuration.ssl_ca_cert)
    except (ssl.SSLError, OSError, ValueError) as exc:
        raise bad_kubeconfig(
            f"the cluster's certificate authority is not a usable certificate ({one_line(str(exc), 120)})"
        ) from None
    try:
        if configuration.cert_file:
            context.load_cert_chain(configuration.cert_file, configuration.key_file)
    except (ssl.SSLError, OSError, ValueError) as exc:
        raise bad_kubeconfig(
            f"the user's client certificate or key is not usable ({one_line(str(exc), 120)})"
        ) from None
    return context


def authorization(configuration: Configuration) -> Optional[str]:
    """The Authorization header's value; the library's refresh hook first re-runs an exec plugin whose
    token has expired (a ToolError when that run fails)."""
    try:
        return configuration.get_api_key_with_prefix(AUTHORIZATION_KEY)
    except ConfigException as exc:
        raise ToolError(Exit.UNVERIFIED, f"kubeconfig credentials: {one_line(redact(str(exc)), 160)}") from None
