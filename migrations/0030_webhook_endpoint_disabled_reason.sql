-- Why agentd itself disabled a webhook endpoint: 'gone' when it answered 410 Gone (the
-- Standard Webhooks way for a receiver to ask to be switched off). Null otherwise; a
-- worker starting with the endpoint in its `[[webhooks]]` enables it again and clears it.
-- Expand-only: a nullable column older processes never name.
ALTER TABLE webhook_endpoints ADD COLUMN IF NOT EXISTS disabled_reason text;
