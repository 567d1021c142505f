"""``costlearn tuning-db``: list the tuning database (read-only), or
``init`` one on a PostgreSQL server with its two roles."""
from __future__ import annotations

import argparse
import statistics

from costlearn.cli.common import old_spelling, positive_int, tuning_db_target
from costlearn.serve.tuning_db import default_path, default_target, is_server_url, key_values
from costlearn.serve.tuning_db_server import READER_ROLE, WRITER_ROLE, copy_store, initialize, open_store


ACTIONS = ("list", "init", "copy")


def cmd_tuning_db(args) -> int:
    if args.action not in ACTIONS:              # `costlearn tuning-db FILE`: the file, listed
        if args.target is not None:
            raise ValueError(f"tuning-db action {args.action!r}; allowed: {', '.join(ACTIONS)} (or a PATH|URL "
                             "alone, to list it)")
        try:
            args.action, args.target = "list", tuning_db_target(args.action)
        except argparse.ArgumentTypeError as e:
            raise ValueError(str(e)) from None
    if args.action == "init":
        return _init(args)
    if args.action == "copy":
        if args.target is None or args.to is None:
            raise ValueError("`costlearn tuning-db copy SOURCE --to TARGET`: both a source and --to are needed")
        entries, tunings = copy_store(args.target, args.to)
        print(f"copied {tunings} tunings' measurements and {entries} entries without measurements into "
              f"{open_store(args.to, create=True).path}")
        return 0
    target = args.target if args.target is not None else args.tuning_db
    if target is None and not is_server_url(default_target()) and not default_path().exists():
        print(f"{default_path()}: no tuning database yet (`costlearn predict ... --measure-top-k K` or "
              "`--tuning-db PATH` records one)")
        return 0
    db = open_store(target, read_only=True)   # listing changes nothing: nothing created, upgraded or set aside
    entries = db.entries()
    measured = db.measurements()
    hosts = sorted({m.host for ms in measured.values() for m in ms})
    print(f"{db.path}: {len(entries)} entr{'y' if len(entries) == 1 else 'ies'}, "
          f"{sum(map(len, measured.values()))} measurements by {len(hosts)} host{'' if len(hosts) == 1 else 's'}")
    for e in entries[-args.last:]:
        print(_shown(f"  {e.problem} {e.family} {e.device} {e.config.config_id} {e.chosen_by} {e.time_us:.1f} us "
                     f"(template {e.template_hash}, costlearn {e.costlearn_version}, {e.updated})"))
        ms = measured.get(key_values(e.problem, e.family, e.device, e.template_hash, e.costlearn_version), [])
        if ms:
            print("    " + _shown(_spread(ms, e.config.config_id)))
        if args.measurements:
            for m in sorted(ms, key=lambda m: (m.config_id, m.host, m.measured)):
                print(_shown(f"    {m.config_id} on {m.host}: p20/p50/p80 {m.p20_us:.2f}/{m.p50_us:.2f}/"
                             f"{m.p80_us:.2f} us, {m.samples} samples, {m.measured}, {_env(m.env)}"))
    return 0


def _shown(text: str) -> str:
    """``text`` with control characters escaped: a stored name can neither
    forge a line of the listing nor drive the terminal."""
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode() for ch in text)


def _spread(ms: list, winner: str) -> str:
    """One line: the hosts behind an entry and the spread of its winner's
    medians across them (max/min - 1)."""
    mine = [m for m in ms if m.config_id == winner]
    hosts = sorted({m.host for m in ms})
    tunings = len({m.tuning_id for m in ms})
    line = f"measured on {len(hosts)} host{'' if len(hosts) == 1 else 's'} ({', '.join(hosts[:5])}" \
           f"{', ...' if len(hosts) > 5 else ''}), {tunings} tuning{'' if tunings == 1 else 's'}"
    if mine:
        p50 = [m.p50_us for m in mine]
        line += (f"; the winner's p50 across them {min(p50):.2f}-{max(p50):.2f} us "
                 f"(spread {100 * (max(p50) / min(p50) - 1):.1f} %, median {statistics.median(p50):.2f})")
    return line


def _env(env: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(env.items())) or "no environment recorded"


def _init(args) -> int:
    if args.target is None or not is_server_url(args.target):
        raise ValueError(f"`costlearn tuning-db init` takes a postgresql:// URL (got {args.target!r}); an SQLite "
                         "file needs no init (it is created at the first record)")
    for line in initialize(args.target, writer=args.writer_role, reader=args.reader_role):
        print(line)
    print(f"next, a login per host, in psql: CREATE ROLE <host> LOGIN IN ROLE {args.writer_role} (tuning hosts) "
          f"or IN ROLE {args.reader_role} (serving hosts); \\password <host>")
    return 0


def add_tuning_db(sub) -> None:
    p = sub.add_parser("tuning-db", help="list the tuning database, or init one on a server",
                       description="list (default): the tuning database's entries (shape, device, config, how "
                       "chosen, time), the hosts that measured each and the spread of their times. Read-only: a "
                       "corrupt file is reported and left as it is. init URL: create the tables on a PostgreSQL "
                       "server and two group roles, one for tuning hosts (read and write) and one for serving "
                       "hosts (read only). copy SOURCE --to TARGET: every entry and measurement of one tuning "
                       "database into another (a host's file into a fleet's server; twice adds nothing).")
    p.add_argument("action", nargs="?", default="list", metavar="{list,init,copy}",
                   help="what to do (default: list); a PATH|URL alone lists that database")
    p.add_argument("target", nargs="?", type=tuning_db_target, default=None, metavar="PATH|URL",
                   help="the tuning database (as --tuning-db)")
    p.add_argument("--tuning-db", default=None, type=tuning_db_target, metavar="PATH|URL",
                   help="tuning database to read, a file or a postgresql:// URL (its password in ~/.pgpass or "
                   "$PGPASSWORD, never on the command line); it must exist and is opened read-only (default: "
                   "$COSTLEARN_TUNING_DB, else tuning.sqlite in the user cache: $COSTLEARN_CACHE, "
                   "$XDG_CACHE_HOME/costlearn or ~/.cache/costlearn)")
    old_spelling(p, "--path", "--tuning-db")
    p.add_argument("--last", type=positive_int, default=50, help="entries to print, newest (default: 50)")
    p.add_argument("--measurements", action="store_true", help="print every measurement of each entry listed")
    p.add_argument("--to", default=None, type=tuning_db_target, metavar="PATH|URL",
                   help="copy: the tuning database to copy into (created where it is a file)")
    p.add_argument("--writer-role", default=WRITER_ROLE, help="init: the tuning hosts' group role")
    p.add_argument("--reader-role", default=READER_ROLE, help="init: the serving hosts' group role")
    p.set_defaults(func=cmd_tuning_db)


PARSERS = {"tuning-db": add_tuning_db}
"""The commands this module adds, each by its function of the subparsers."""
