-- The head of each contact's queue of deliveries to a webhook: the pending
-- delivery a lease may take next. A lease used to find it by walking the
-- pending deliveries in due order and asking of each whether an earlier
-- one of its contact was pending: behind one contact's long queue (a
-- receiver down, a lead sending many events), every lease walked the
-- whole queue. Now a delivery is marked `head` when it is its contact's
-- earliest pending one (when it is dispatched with none pending before
-- it, or when the one before it ends), and the lease reads the heads
-- alone, through their own index (src/store/postgres/webhooks.rs says how
-- a dispatch and an attempt that ends a delivery keep the mark right when
-- they run at once).
--
-- Only meaningful while the delivery is pending: an ended delivery keeps
-- its mark, and the index leaves it out.
ALTER TABLE webhook_deliveries ADD COLUMN head BOOLEAN NOT NULL DEFAULT false;
UPDATE webhook_deliveries AS d SET head = true
WHERE d.state = 'pending'
  AND NOT EXISTS (
      SELECT 1 FROM webhook_deliveries e
      WHERE e.webhook_id = d.webhook_id AND e.contact_key = d.contact_key
        AND e.state = 'pending' AND e.number < d.number);
-- The lease: the heads, oldest due first.
DROP INDEX webhook_deliveries_due;
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at, number)
    WHERE state = 'pending' AND head;
