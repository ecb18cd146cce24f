-- beside: previous
-- Issue 34, part 8: a database restored from a backup has forgotten what happened after it; the vendors have
-- not (I24). `ticketiq db restore` marks every run that had not ended at the backup's point as restored; each
-- write such a run plans is settled as a call in doubt is before it is sent (engine/settlement.py), and one that
-- can be neither read back nor sent again under a key its vendor dedupes waits for an operator: an approval
-- filed with the reason it is asked (`approvals.asked_why`), which `ticketiq runs resume` (POST
-- /v1/runs/{id}/resume) decides, or `runs stop` ends with its run.
--
-- The previous release runs beside it: it never reads or writes these columns (its statements name theirs). It
-- must not drive a restored run (it would send its writes blind): docs/operate.md says to restore with
-- processes of this release only.
ALTER TABLE runs ADD COLUMN restored_at timestamptz;
ALTER TABLE runs ADD COLUMN restored_from text;
COMMENT ON COLUMN runs.restored_at IS 'When `ticketiq db restore` found the run unfinished in the backup (I24): each write it plans is settled as in doubt. NULL: never restored unfinished.';
COMMENT ON COLUMN runs.restored_from IS 'The backup it was restored from, as the restore named it (its file name and when it was taken).';

ALTER TABLE approvals ADD COLUMN asked_why text;
COMMENT ON COLUMN approvals.asked_why IS 'Why a person is asked, when not the approval gate: a restored run''s write that can be neither read back nor sent again under a deduped key (I24). NULL: the approval gate asked.';
