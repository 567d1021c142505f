"""``costlearn tuning-db``: list the tuning database, read-only."""
from __future__ import annotations

from costlearn.cli.common import old_spelling, positive_int
from costlearn.serve.tuning_db import default_path, default_target, is_server_url
from costlearn.serve.tuning_db_server import open_store


def cmd_tuning_db(args) -> int:
    if args.tuning_db is None and not is_server_url(default_target()) and not default_path().exists():
        print(f"{default_path()}: no tuning database yet (`costlearn predict ... --measure-top-k K` or "
              "`--tuning-db PATH` records one)")
        return 0
    db = open_store(args.tuning_db, read_only=True)   # listing changes nothing: nothing created, upgraded or set aside
    entries = db.entries()
    print(f"{db.path}: {len(entries)} entr{'y' if len(entries) == 1 else 'ies'}")
    for e in entries[-args.last:]:
        print(f"  {e.problem} {e.family} {e.device} {e.config.config_id} {e.chosen_by} {e.time_us:.1f} us "
              f"(template {e.template_hash}, costlearn {e.costlearn_version}, {e.updated})")
    return 0


def add_tuning_db(sub) -> None:
    p = sub.add_parser("tuning-db", help="list the tuning database",
                       description="List the tuning database's entries (shape, device, config, how chosen, "
                       "time). Read-only: a corrupt file is reported and left as it is.")
    p.add_argument("--tuning-db", default=None, metavar="PATH|URL",
                   help="tuning database to read, a file or a postgresql:// URL; it must exist and is opened "
                   "read-only (default: "
                   "$COSTLEARN_TUNING_DB, else tuning.sqlite in the user cache: $COSTLEARN_CACHE, "
                   "$XDG_CACHE_HOME/costlearn or ~/.cache/costlearn)")
    old_spelling(p, "--path", "--tuning-db")
    p.add_argument("--last", type=positive_int, default=50, help="entries to print, newest (default: 50)")
    p.set_defaults(func=cmd_tuning_db)


PARSERS = {"tuning-db": add_tuning_db}
"""The commands this module adds, each by its function of the subparsers."""
