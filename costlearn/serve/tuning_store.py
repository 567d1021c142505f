"""The queries both tuning databases answer, written once
(:class:`TuningStore`): the entries (``get``, ``get_many``, ``put``,
``entries``), a tuning's measurements (``record``, ``verdict``,
``measurements``, ``device_measurements``), a compiler's cached files (``get_blobs``,
``put_blob``) and the leases of :mod:`costlearn.serve.fleet`
(``take_lease``, ``free_lease``), each over its store's way of running a
statement. The stores are
:class:`~costlearn.serve.tuning_db.TuningDB` (an SQLite file) and
:class:`~costlearn.serve.tuning_db_server.ServerTuningDB` (a PostgreSQL
server); their statements and rows are :mod:`costlearn.serve.tuning_rows`'.
"""
from __future__ import annotations

from costlearn.core.problem import Problem
from costlearn.core.version import __version__
from costlearn.serve.fleet import (FREE_LEASE, SELECT_ALL_MEASUREMENTS, SELECT_DEVICE_MEASUREMENTS,
                                   SELECT_MEASUREMENTS, TAKE_LEASE, Verdict, check_name, lease_seconds)
from costlearn.serve.tuning_rows import (KEY_COLUMNS, MANY, PUT_BLOB, UPSERT, TuningEntry, blob_values, decode_many,
                                         decode_row, entries_from_rows, entry_values, key_args, key_values,
                                         key_verdict, measurement_rows, measurements_by_key, record_in, select_blobs,
                                         select_entry, select_many)

__all__ = ["TuningStore"]


class TuningStore:
    """The queries of a tuning database: same key, a measured entry never
    replaced by a predicted one, a damaged or infeasible row a miss, in
    every store.

    A store sets ``path`` (what messages name), ``read_only`` and
    :attr:`PLACEHOLDER`, and provides :meth:`_run` (a statement's read),
    :meth:`_transaction` (statements in one write transaction) and
    :meth:`_table_rows` (a read of a table an older store may lack) and
    :meth:`_stream` (the same, streamed); it may
    change :meth:`_write` (a write), :meth:`_statement` (a shared statement
    in its dialect) and :meth:`_key_columns` (the key as its table holds
    it).
    """

    PLACEHOLDER = "?"
    """The parameter placeholder of the statements built for this store."""

    # -- what each store provides -------------------------------------------

    def _run(self, fn):
        """``fn(connection)`` on this thread's connection, its value."""
        raise NotImplementedError

    def _write(self, fn):
        """:meth:`_run` ``fn``, a write."""
        return self._run(fn)

    def _transaction(self, work):
        """``work(execute)`` in one write transaction, its value;
        ``execute(sql, params)`` runs a statement of
        :mod:`costlearn.serve.tuning_rows` or :mod:`costlearn.serve.fleet`."""
        raise NotImplementedError

    def _table_rows(self, table: str, sql: str, params=None) -> list:
        """The rows ``sql`` (built for this store) reads from ``table``;
        none where the store has no such table (an older one)."""
        raise NotImplementedError

    def _stream(self, table: str, sql: str, params=()):
        """The rows ``sql`` (built for this store) reads from ``table``, a
        batch at a time from one query on one connection, a text value that
        is not UTF-8 as its bytes; none where the store has no such table."""
        raise NotImplementedError

    def _statement(self, sql: str) -> str:
        """A statement of :mod:`costlearn.serve.tuning_rows` or
        :mod:`costlearn.serve.fleet` (SQLite's dialect, ``{now}`` for the
        clock) in this store's dialect."""
        return sql

    def _key_columns(self) -> str:
        """The key columns of table ``tuned`` as this store reads them."""
        return KEY_COLUMNS

    def _check_writable(self) -> None:
        """Raise PermissionError where the store was opened read-only."""
        if self.read_only:
            raise PermissionError(f"the tuning database {self.path} was opened read-only")

    # -- queries ------------------------------------------------------------

    def get(self, problem: Problem, family: str, device: str, template_hash: str, *, spec=None,
            costlearn_version: str = __version__) -> TuningEntry | None:
        """The entry for a problem, or None (a miss).

        Parameters
        ----------
        problem : Problem
        family : str
            Kernel family.
        device : str
            Device slug.
        template_hash : str
        spec : DeviceSpec, optional
            The device the config would launch on: a stored config that is
            infeasible in today's tile space for this problem is a miss.
        costlearn_version : str

        Raises
        ------
        TypeError
            If ``problem`` is not a Problem.
        OSError
            The store cannot be used (a server away, a file that cannot be
            read).
        """
        key = key_values(problem, family, device, template_hash, costlearn_version)
        sql = self._statement(select_entry(self._key_columns(), "?"))
        return decode_row(self._run(lambda c: c.execute(sql, key).fetchone()), *key_args(key), spec)

    def get_many(self, problems, family: str, device: str, template_hash: str, *, spec=None,
                 costlearn_version: str = __version__) -> list:
        """The entries of many problems of one family and device in one
        query per :data:`~costlearn.serve.tuning_rows.MANY` problems (a
        graph's GEMMs at compile time): a list, an entry or None per
        problem, in order; each as :meth:`get` would answer it.

        Raises
        ------
        TypeError
            If a problem is not a Problem.
        """
        problems, out = list(problems), []
        for i in range(0, len(problems), MANY):     # a statement takes a bounded number of parameters
            sql, params, keys = select_many(problems[i:i + MANY], family, device, template_hash, costlearn_version,
                                            self.PLACEHOLDER)
            out += decode_many(self._run(lambda c: c.execute(sql, params).fetchall()), keys, spec)
        return out

    def put(self, entry: TuningEntry) -> bool:
        """Store an entry; a measured entry is never replaced by a predicted
        one.

        Returns
        -------
        bool
            True if the entry was written.

        Raises
        ------
        ValueError
            If ``chosen_by`` is not one of
            :data:`~costlearn.serve.tuning_rows.CHOSEN_BY`, the time is not
            finite and positive, or the shape or dtype is invalid
            (:func:`~costlearn.serve.tuning_rows.entry_values`).
        OSError
            Opened read-only, or the store cannot be written (a server's
            read-only role).
        """
        self._check_writable()
        values = entry_values(entry)
        return bool(self._write(lambda c: c.execute(self._statement(UPSERT), values).rowcount))

    def record(self, problem: Problem, family: str, device: str, template_hash: str, measurements, *,
               source: str, costlearn_version: str = __version__) -> tuple[TuningEntry, Verdict]:
        """Store a tuning's measurements of a problem and make the key's
        entry the answer all its measurements decide
        (:func:`costlearn.serve.fleet.decide`), in one transaction: a kill
        leaves both or neither, and measurements already stored (the same
        tuning delivered again: a retry after a lost reply, a spool sent
        again) add nothing.

        Parameters
        ----------
        problem, family, device, template_hash, costlearn_version
            The key (as :meth:`get`).
        measurements : sequence of Measurement
            Non-empty; configs of ``family``.
        source : str
            What measured (the model folder and its sha256 prefix).

        Returns
        -------
        (TuningEntry, Verdict)
            The key's entry now, and the verdict behind it.

        Raises
        ------
        TypeError, ValueError
            A bad key, measurement or an empty list.
        OSError
            Opened read-only, or the store cannot be written.
        """
        self._check_writable()
        key, rows = measurement_rows(problem, family, device, template_hash, costlearn_version, measurements)
        return self._transaction(lambda execute: record_in(execute, key, rows, source))

    def verdict(self, problem: Problem, family: str, device: str, template_hash: str, *,
                costlearn_version: str = __version__) -> Verdict | None:
        """What the key's stored measurements decide now, as :meth:`record`
        decided them (:func:`~costlearn.serve.tuning_rows.key_verdict`): the
        winner, each config's time and the configs tied with the winner.
        None where the key has no measurements (a prediction, a store made
        before measurements).

        Parameters
        ----------
        problem, family, device, template_hash, costlearn_version
            The key (as :meth:`get`).

        Raises
        ------
        TypeError, ValueError
            A bad key (as :meth:`get`).
        OSError
            The store cannot be read.
        """
        key = key_values(problem, family, device, template_hash, costlearn_version)
        return key_verdict(self._table_rows("measurements", self._statement(SELECT_MEASUREMENTS), key), family)

    def measurements(self) -> dict:
        """Every stored measurement, by key (the 10 values of
        :func:`~costlearn.serve.tuning_rows.key_values`): a dict of tuple to
        list of Measurement; rows that do not decode are left out. Empty for
        a store made before measurements (a file of an older schema read as
        it is, a server made by an older costlearn)."""
        return measurements_by_key(self._table_rows("measurements", self._statement(SELECT_ALL_MEASUREMENTS)))

    def device_measurements(self, device: str):
        """Every stored measurement row of the device class ``device`` as it
        is stored, unchecked: tuples of the 10 key values then the 11 columns
        of :data:`costlearn.serve.fleet.SELECT_MEASUREMENTS`, in the order of
        :data:`costlearn.serve.fleet.SELECT_DEVICE_MEASUREMENTS`; none in a
        store made before measurements. For a reader that reports each row
        it cannot use (:func:`costlearn.serve.fleet.measurement_from_row`
        decodes one) instead of leaving it out as :meth:`measurements` does.

        A generator over one query, streamed (:meth:`_stream`): memory is
        bounded by a batch of rows whatever the store holds, every row is
        read once, and all come from the one database and moment the query
        started at (rows recorded meanwhile are the next reader's). A text
        value that is not UTF-8 comes as its bytes.

        Raises
        ------
        TypeError, ValueError
            A ``device`` that is not a name (:func:`costlearn.serve.fleet.check_name`).
        OSError
            The store cannot be read (also part way through).
        """
        params = (check_name("device", device),)
        yield from self._stream("measurements", self._statement(SELECT_DEVICE_MEASUREMENTS), params)

    def get_blobs(self, cache_key: str, filenames) -> dict:
        """The stored files of ``filenames`` under ``cache_key``, ``{name:
        bytes}`` (those not stored are absent), in one query: a compiler's
        remote cache (:mod:`costlearn.interop.triton_cache`). A store made
        before blobs holds none.

        Raises
        ------
        TypeError, ValueError
            A key or name that is not a str of 1-1024 characters.
        """
        sql, params = select_blobs(cache_key, filenames, self.PLACEHOLDER)
        if not sql:
            return {}
        return {name: bytes(data) for name, data in self._table_rows("blobs", sql, params)
                if isinstance(name, str) and isinstance(data, (bytes, memoryview))}

    def put_blob(self, cache_key: str, filename: str, data) -> None:
        """Store a file under ``cache_key`` (replacing one of that name).

        Raises
        ------
        TypeError, ValueError
            As :func:`costlearn.serve.tuning_rows.blob_values`.
        OSError
            Opened read-only, or the store cannot be written.
        """
        self._check_writable()
        values = blob_values(cache_key, filename, data)
        self._write(lambda c: c.execute(self._statement(PUT_BLOB), values))

    def take_lease(self, problem: Problem, family: str, device: str, template_hash: str, holder: str, *,
                   seconds: float, costlearn_version: str = __version__) -> bool:
        """Take the key's lease for ``seconds`` on the store's clock (see
        :mod:`costlearn.serve.fleet`): True if ``holder`` holds it now
        (free, expired, or already its own), False if another holder does.

        Raises
        ------
        OSError
            Opened read-only, or the store cannot be written.
        """
        self._check_writable()
        params = (*key_values(problem, family, device, template_hash, costlearn_version), check_name("holder", holder),
                  lease_seconds(seconds))
        return bool(self._write(lambda c: c.execute(self._statement(TAKE_LEASE), params).rowcount))

    def free_lease(self, problem: Problem, family: str, device: str, template_hash: str, holder: str, *,
                   costlearn_version: str = __version__) -> None:
        """Free the key's lease if ``holder`` holds it (nothing where opened
        read-only)."""
        if self.read_only:
            return
        params = (*key_values(problem, family, device, template_hash, costlearn_version), str(holder))
        self._write(lambda c: c.execute(self._statement(FREE_LEASE), params))

    def entries(self) -> list[TuningEntry]:
        """Every stored entry (all versions), oldest first; a row that does
        not decode (:func:`~costlearn.serve.tuning_rows.decode_row`) is left
        out."""
        return entries_from_rows(self._run(lambda c: c.execute(
            f"SELECT {self._key_columns()}, config_id, how, time_us, times_json, source, updated FROM tuned "
            "ORDER BY updated").fetchall()))
