"""The floor of the side-by-side bench: one committed single-row UPDATE a step, on one connection in
autocommit, prepared by psycopg after its fifth execution as a driver's statements are. A "run" here
is `--steps` such UPDATEs, so that its figures divide as the systems' do."""

from __future__ import annotations

import psycopg
from measure import arguments, database_url, measure, report


def main() -> None:
    args = arguments(__doc__)
    url = database_url()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE floor_row (id int PRIMARY KEY, step bigint NOT NULL, note text NOT NULL)")
        conn.execute("INSERT INTO floor_row VALUES (1, 0, '')")

        def run(i: int) -> None:
            for step in range(args.steps):
                conn.execute("UPDATE floor_row SET step = step + 1, note = %s WHERE id = 1", (f"OPS-{i}-{step}",))

        for i in range(args.warmup):
            run(i)
        version = conn.info.server_version  # e.g. 180001 for 18.1
        report(measure("floor", f"PostgreSQL {version // 10000}.{version % 10000}", url, args.runs, args.steps, run))


if __name__ == "__main__":
    main()
