"""`gpu-portal`: GPU Portal from a terminal, over its REST API and an API token.

Sign in once (`gpu-portal login --url https://portal.example.com`, with a token from the
portal's API tokens page); the address and token are kept in ~/.config/gpu-portal/config.json
(readable by you only), or given by GPU_PORTAL_URL and GPU_PORTAL_TOKEN. Every command takes
`--output json` for scripts; its exit code says what happened (client.OK, REFUSED, USAGE, ...).
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from gpu_portal_cli.client import NOT_SIGNED_IN, OK, USAGE, Client, CliError

WAITING = ("submitting", "queued", "admitted", "preempted")
FINAL = ("succeeded", "failed", "stopped")
POLL_SECONDS = 1.0


def config_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "gpu-portal" / "config.json"


def _client() -> Client:
    url, token = os.environ.get("GPU_PORTAL_URL", ""), os.environ.get("GPU_PORTAL_TOKEN", "")
    if not (url and token) and config_path().exists():
        kept = json.loads(config_path().read_text())
        url, token = url or kept.get("url", ""), token or kept.get("token", "")
    if not (url and token):
        raise CliError("You are not signed in: run `gpu-portal login --url <portal address>` with a token from the "
                       "portal's API tokens page.", NOT_SIGNED_IN)
    return Client(url, token)


# --- What a command prints -------------------------------------------------------------------------


class Out:
    def __init__(self, as_json: bool) -> None:
        self.as_json = as_json

    def show(self, data: Any, columns: Sequence[tuple[str, str]] = (), *, text: str = "") -> None:
        """JSON as the API gave it, or a table of `columns` (key, heading), or `text`."""
        if self.as_json:
            print(json.dumps(data, indent=2, sort_keys=True, default=str))
        elif columns:
            rows = data if isinstance(data, list) else [data]
            table = [[heading for _, heading in columns]] + [[_cell(row, key) for key, _ in columns] for row in rows]
            widths = [max(len(line[i]) for line in table) for i in range(len(columns))]
            for line in table:
                print("  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip())
        else:
            print(text)

    def progress(self, message: str) -> None:
        """Progress goes to standard error, so standard output stays what the command answers."""
        if sys.stderr.isatty() and not self.as_json:
            print(f"\r\033[K{message}", end="", file=sys.stderr, flush=True)
        else:
            print(message, file=sys.stderr, flush=True)

    def progress_done(self) -> None:
        if sys.stderr.isatty() and not self.as_json:
            print(file=sys.stderr)


def _cell(row: dict[str, Any], key: str) -> str:
    value: Any = row
    for part in key.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    if isinstance(value, list):
        return ", ".join(map(str, value))
    return "" if value is None else str(value)


# --- Commands --------------------------------------------------------------------------------------


def login(args: argparse.Namespace, out: Out) -> int:
    token = args.token or os.environ.get("GPU_PORTAL_TOKEN", "")
    if not token:
        if not sys.stdin.isatty():
            token = sys.stdin.readline().strip()
        else:
            token = getpass.getpass("API token (from the portal's API tokens page): ").strip()
    if not token:
        raise CliError("Give a token: --token, GPU_PORTAL_TOKEN, or on standard input.", USAGE)
    client = Client(args.url.rstrip("/"), token)
    teams = client.all("/api/teams/")
    path = config_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch(mode=0o600, exist_ok=True)
    path.chmod(0o600)
    path.write_text(json.dumps({"url": client.url, "token": token}))
    out.show({"url": client.url, "teams": [team["slug"] for team in teams]},
             text=f"Signed in to {client.url}; you see {len(teams)} team{'s' if len(teams) != 1 else ''}.")
    return OK


def logout(args: argparse.Namespace, out: Out) -> int:
    config_path().unlink(missing_ok=True)
    out.show({"signed_in": False}, text="Signed out: the token is forgotten here (revoke it on the portal's API tokens page).")
    return OK


def teams(args: argparse.Namespace, out: Out) -> int:
    out.show(_client().all("/api/teams/"), [("slug", "TEAM"), ("name", "NAME"), ("namespace", "NAMESPACE")])
    return OK


def quota_list(args: argparse.Namespace, out: Out) -> int:
    rows = _client().all("/api/quota-requests/", team=args.team, status=args.status)
    out.show(rows, [("id", "ID"), ("team", "TEAM"), ("status", "STATUS"), ("requester", "BY"), ("justification", "WHY")])
    return OK


def quota_request(args: argparse.Namespace, out: Out) -> int:
    client = _client()
    flavors = {flavor["slug"]: flavor["id"] for flavor in client.all("/api/flavors/")}
    if args.flavor not in flavors:
        raise CliError(f"There is no flavor “{args.flavor}”; flavors: {', '.join(sorted(flavors))}.", USAGE)
    made = client.post("/api/quota-requests/", {
        "team": args.team, "lines": [{"flavor": flavors[args.flavor], "units": args.units}],
        "justification": args.reason, "ends_on": args.until})
    out.show(made, text=f"Asked for {args.units} × {args.flavor} for {args.team}: request #{made['id']}, {made['status']}.")
    return OK


def templates(args: argparse.Namespace, out: Out) -> int:
    out.show(_client().all("/api/templates/", team=args.team), [("id", "ID"), ("slug", "TEMPLATE"), ("kind", "KIND"),
                                                               ("name", "NAME")])
    return OK


def _parameters(pairs: list[str]) -> dict[str, Any]:
    """-p name=value, the value read as JSON where it is JSON (20, 0.001, true, ["a"]), else as text."""
    given: dict[str, Any] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise CliError(f"Write a parameter as name=value, not “{pair}”.", USAGE)
        try:
            given[name] = json.loads(value)
        except ValueError:
            given[name] = value
    return given


def launch(args: argparse.Namespace, out: Out) -> int:
    client = _client()
    body = {"team": args.team, "template": args.template, "flavor": args.flavor, "units": args.units,
            "name": args.name or "", "priority": args.priority, "parameters": _parameters(args.param or [])}
    workload = client.post("/api/workloads/", {key: value for key, value in body.items() if value is not None})
    if args.wait:
        workload = _wait(client, out, workload["id"], until=("running", *FINAL))
    out.show(workload, text=f"Launched {workload['name']} (#{workload['id']}) for {workload['team']}: "
                            f"{workload['phase']}{' — ' + workload['reason'] if workload.get('reason') else ''}")
    return OK


def _wait(client: Client, out: Out, pk: int, *, until: tuple[str, ...]) -> dict[str, Any]:
    seen = ""
    while True:
        workload: dict[str, Any] = client.get(f"/api/workloads/{pk}/")
        if workload["phase"] in until:
            out.progress_done()
            return workload
        now = f"{workload['name']}: {workload['phase']}{' — ' + workload['reason'] if workload.get('reason') else ''}"
        if now != seen:
            out.progress(now)
            seen = now
        time.sleep(POLL_SECONDS)


WORKLOAD_COLUMNS = (("id", "ID"), ("name", "NAME"), ("team", "TEAM"), ("kind", "KIND"), ("phase", "PHASE"),
                    ("flavor", "FLAVOR"), ("total_units", "UNITS"), ("reason", "REASON"))


def workloads(args: argparse.Namespace, out: Out) -> int:
    rows = _client().all("/api/workloads/", team=args.team, phase=args.phase, mine=1 if args.mine else None)
    out.show(rows, WORKLOAD_COLUMNS)
    return OK


def status(args: argparse.Namespace, out: Out) -> int:
    client = _client()
    workload = client.get(f"/api/workloads/{args.id}/")
    if workload["phase"] in WAITING and workload["phase"] != "submitting":
        workload["why_waiting"] = client.get(f"/api/workloads/{args.id}/why-waiting/")
    lines = [f"{workload['name']} (#{workload['id']}) of {workload['team']}: {workload['phase']}",
             *([f"  {workload['reason']}"] if workload.get("reason") else []),
             (f"  {workload['total_units']} × {workload['flavor']}, priority {workload['priority']}"
             f"{', on borrowed quota' if workload.get('on_borrowed') else ''}"),
             *([f"  at {workload['endpoint']}"] if workload.get("endpoint") else [])]
    waiting = workload.get("why_waiting") or {}
    if waiting.get("position") is not None:
        lines.append(f"  place in the queue: {waiting['position']}")
    out.show(workload, text="\n".join(lines))
    return OK


def logs(args: argparse.Namespace, out: Out) -> int:
    client = _client()
    shown: list[str] = []
    while True:
        answer = client.get(f"/api/workloads/{args.id}/logs/", tail=args.tail, pod=args.pod)
        lines = [str(line) for line in answer.get("lines") or []]
        if answer.get("unreachable") and not lines:
            out.progress(f"No log yet: {answer['unreachable']}")
        new = _after(shown, lines)
        if out.as_json and not args.follow:
            out.show(answer)
            return OK
        for line in new:
            print(json.dumps({"line": line}) if out.as_json else line, flush=True)
        shown = (shown + new)[-5000:]
        if not args.follow:
            return OK
        workload = client.get(f"/api/workloads/{args.id}/")
        if workload["phase"] in FINAL:
            return OK
        time.sleep(POLL_SECONDS)


def _after(shown: list[str], lines: list[str]) -> list[str]:
    """The lines of a new read that come after what was printed: the longest end of what was
    printed that the new read starts with is where they meet."""
    if not shown:
        return lines
    for size in range(min(len(shown), len(lines)), 0, -1):
        if shown[-size:] == lines[:size]:
            return lines[size:]
    return lines  # nothing in common: the log moved past a whole read


def stop(args: argparse.Namespace, out: Out) -> int:
    workload = _client().post(f"/api/workloads/{args.id}/stop/")
    out.show(workload, text=f"Stopping {workload['name']} (#{workload['id']}): {workload['phase']}.")
    return OK


def relaunch(args: argparse.Namespace, out: Out) -> int:
    workload = _client().post(f"/api/workloads/{args.id}/relaunch/")
    out.show(workload, text=f"Relaunched as {workload['name']} (#{workload['id']}): {workload['phase']}.")
    return OK


def usage(args: argparse.Namespace, out: Out) -> int:
    report = _client().get("/api/billing/usage/", month=args.month, team=args.team, by=args.by)
    if out.as_json:
        out.show(report)
        return OK
    groups = report["by"]
    out.show(report["rows"], [*((group, group.upper()) for group in groups), ("gpu_hours", "GPU-HOURS"), ("cost", "COST")])
    print(f"Total {report['total']['gpu_hours']} GPU-hours, {report['total']['cost']} {report['currency']} "
          f"({report['start']} to {report['end']}).")
    return OK


def statement(args: argparse.Namespace, out: Out) -> int:
    body = _client().request("GET", f"/api/billing/statements/{args.month}/{args.format}/", raw=True)
    target = Path(args.file or f"statement-{args.month}.{args.format}")
    target.write_bytes(body)
    out.show({"file": str(target), "bytes": len(body)}, text=f"Wrote the statement of {args.month} to {target}.")
    return OK


def completion(args: argparse.Namespace, out: Out) -> int:
    parser = build_parser()
    commands = sorted(_subcommands(parser))
    words = " ".join(commands)
    if args.shell == "bash":
        print(f'_gpu_portal() {{ local cur=${{COMP_WORDS[COMP_CWORD]}}; '
              f'if [ "$COMP_CWORD" -eq 1 ]; then COMPREPLY=($(compgen -W "{words}" -- "$cur")); '
              f'else COMPREPLY=($(compgen -W "--output --help" -- "$cur")); fi; }}\n'
              f"complete -F _gpu_portal gpu-portal")
    else:
        print(f"#compdef gpu-portal\n_arguments '1:command:({words})' '*::arg:_default'")
    return OK


def _subcommands(parser: argparse.ArgumentParser) -> list[str]:
    for action in parser._actions:  # argparse keeps its subcommands only here
        if isinstance(action, argparse._SubParsersAction):
            return list(action.choices)
    return []


# --- The parser ------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gpu-portal", description="GPU Portal from a terminal.")
    parser.add_argument("-o", "--output", choices=("table", "json"), default="table", help="json for scripts")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, handler: Callable[[argparse.Namespace, Out], int], text: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=text, description=text)
        sub.add_argument("-o", "--output", choices=("table", "json"), default=argparse.SUPPRESS, help="json for scripts")
        sub.set_defaults(handler=handler)
        return sub

    sub = command("login", login, "Sign in with an API token and keep it for the next commands.")
    sub.add_argument("--url", required=True, help="the portal's address, e.g. https://gpu.example.com")
    sub.add_argument("--token", help="an API token; else GPU_PORTAL_TOKEN, standard input or a prompt")
    command("logout", logout, "Forget the kept token.")
    command("teams", teams, "The teams you see.")
    sub = command("quota", quota_list, "Quota requests: yours and your teams'.")
    sub.add_argument("--team")
    sub.add_argument("--status", choices=("pending", "approved", "rejected", "cancelled", "expired"))
    sub = command("request-quota", quota_request, "Ask for GPU quota for a team.")
    sub.add_argument("--team", required=True)
    sub.add_argument("--flavor", required=True, help="a flavor's slug")
    sub.add_argument("--units", required=True, type=int)
    sub.add_argument("--reason", required=True, help="why the team needs it")
    sub.add_argument("--until", help="last day (YYYY-MM-DD) of temporary quota")
    sub = command("templates", templates, "What you may launch.")
    sub.add_argument("--team")
    sub = command("launch", launch, "Launch a workload from a template.")
    sub.add_argument("template", help="the template's id or slug")
    sub.add_argument("--team", required=True)
    sub.add_argument("--flavor", required=True, help="a flavor's slug")
    sub.add_argument("--units", type=int)
    sub.add_argument("--name")
    sub.add_argument("--priority", choices=("low", "normal", "high"))
    sub.add_argument("-p", "--param", action="append", metavar="NAME=VALUE", help="a template parameter; repeat")
    sub.add_argument("--wait", action="store_true", help="wait until it runs or ends, showing where it stands")
    sub = command("list", workloads, "Workloads you see.")
    sub.add_argument("--team")
    sub.add_argument("--phase")
    sub.add_argument("--mine", action="store_true", help="only yours")
    for name, handler, text in (("status", status, "Where a workload stands, and why it waits."),
                                ("stop", stop, "Stop a workload."), ("relaunch", relaunch, "Launch a copy of a workload.")):
        command(name, handler, text).add_argument("id", type=int)
    sub = command("logs", logs, "A workload's log.")
    sub.add_argument("id", type=int)
    sub.add_argument("--tail", type=int, default=100)
    sub.add_argument("--pod")
    sub.add_argument("-f", "--follow", action="store_true", help="keep printing new lines until it ends")
    sub = command("usage", usage, "GPU-hours and cost.")
    sub.add_argument("--month", help="YYYY-MM; this month by default")
    sub.add_argument("--team")
    sub.add_argument("--by", default="team,flavor")
    sub = command("statement", statement, "Download a month's statement.")
    sub.add_argument("month", help="YYYY-MM")
    sub.add_argument("--format", choices=("csv", "pdf"), default="csv")
    sub.add_argument("--file", help="where to write it; statement-<month>.<format> by default")
    sub = command("completion", completion, "Print shell completion: eval \"$(gpu-portal completion bash)\".")
    sub.add_argument("shell", choices=("bash", "zsh"))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:  # argparse has said what is wrong
        return USAGE if exit_.code not in (0, None) else OK
    out = Out(args.output == "json")
    try:
        return int(args.handler(args, out))
    except CliError as error:
        if out.as_json:
            print(json.dumps({"error": error.message, "exit_code": error.code}), file=sys.stderr)
        else:
            print(f"gpu-portal: {error.message}", file=sys.stderr)
        return error.code
    except KeyboardInterrupt:
        return 130
