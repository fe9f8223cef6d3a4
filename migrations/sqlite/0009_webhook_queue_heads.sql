-- The head of each contact's queue of deliveries to a webhook: the pending
-- delivery a lease may take next. A lease used to find it by walking the
-- pending deliveries in due order and asking of each whether an earlier
-- one of its contact was pending: behind one contact's long queue (a
-- receiver down, a lead sending many events), every lease walked the
-- whole queue, inside the write lock, and the event writer waited for it
-- (an intake flood of one contact with a webhook fell from 46,700 to 5,100
-- events a second; server/benches/intake_load/NOTES.md). Now a delivery is
-- marked `head` when it is its contact's earliest pending one (when it is
-- dispatched with none pending before it, or when the one before it
-- ends), and the lease reads the heads alone, through their own index.
--
-- Only meaningful while the delivery is pending: an ended delivery keeps
-- its mark, and the index leaves it out.
ALTER TABLE webhook_deliveries ADD COLUMN head INTEGER NOT NULL DEFAULT 0
    CHECK (head IN (0, 1));
UPDATE webhook_deliveries AS d SET head = 1
WHERE d.state = 'pending'
  AND NOT EXISTS (
      SELECT 1 FROM webhook_deliveries e
      WHERE e.webhook_id = d.webhook_id AND e.contact_key = d.contact_key
        AND e.state = 'pending' AND e.number < d.number);
-- The lease: the heads, oldest due first.
DROP INDEX webhook_deliveries_due;
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at, number)
    WHERE state = 'pending' AND head = 1;
