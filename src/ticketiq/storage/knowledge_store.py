"""Reads of the knowledge table (the issues source syncs wrote): the agents' full-text search, and the
labelled rows classifier training and fine-tuning learn from. None is about a job: they fence nothing.
A source sync's writes are its job's (`JobHandle.write_page`, fenced by the attempt)."""

from __future__ import annotations

from ticketiq.storage.database import Database, Row


class KnowledgeStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def search(self, source: str, query: str, project: str | None, limit: int) -> list[Row]:
        """Ranked matches of a websearch-syntax query: key, project, title, labels, status, snippet, rank."""
        params = {"query": query, "project": project, "limit": limit, "source": source}
        return await self.db.fetch_all("knowledge.search", params)

    async def labelled_rows(self, project: str | None) -> list[Row]:
        """Every row of the project (all projects when None) as classifier training reads it: `key`
        (source:key), `text` (title and body) and `labels`, in key order."""
        return await self.db.fetch_all("classifiers.knowledge_rows", {"project": project})

    async def labelled_issues(self, project: str, limit: int) -> list[Row]:
        """The Jira issues of a project that carry labels, in key order: a fine-tune's training examples."""
        return await self.db.fetch_all("fine_tune.knowledge_issues", {"project": project, "limit": limit})
