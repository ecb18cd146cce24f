"""Intake: what each entry point does with what comes in from outside, apart from its HTTP. Webhook
triggers and Jira ticket events (their secrets, deliveries and I19's signed-once claim), the Teams
inbox and its turns, the cron scheduler, an A2A message's run (`RunOfMessage`), the Idempotency-Key
decision, and the inspector's ad hoc call. Each turns a request into engine calls; the run core
never uses them.

May import engine, agents, tools, model, auth, values, storage and the base modules. Never jobs,
leader, process, console or entries: entries serve these over HTTP, the leader fires the schedules
and hands back the inbox, the process starts them.
"""
