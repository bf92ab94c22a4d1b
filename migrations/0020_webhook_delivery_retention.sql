-- Finished webhook deliveries (delivered, or failed for good) are pruned by the janitor after
-- AGENTD_WEBHOOK_DELIVERY_RETENTION (7 days by default). Before this, the delivery queue kept
-- one row per (endpoint, event) forever. Pending rows are never pruned. Additive only.
CREATE INDEX webhook_deliveries_finished ON webhook_deliveries (updated_at)
    WHERE status IN ('delivered', 'failed');
