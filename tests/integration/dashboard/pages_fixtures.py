"""Fixtures of the Offers, Prices, Budgets, Fleet and Users page tests: the real API app over
the per-test flushed real Redis, and browsers-to-be (TestClients) signed in by the dashboard's
session cookie as the admin or as a user."""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest
from fastapi.testclient import TestClient

from scheduler.api.app import create_app
from scheduler.api.auth import SESSION_COOKIE, csrf_token
from scheduler.checkpoints.local import LocalObjectStore
from scheduler.store import Store
from scheduler.store.agents import AgentTokens
from scheduler.store.users import Role

ADMIN_TOKEN = "admin-bootstrap-token"
CSRF_RE = re.compile(r'name="csrf_token" value="([0-9a-f]{64})"')


@dataclass
class Dashboard:
    """The app and its store, with sessions: ``admin`` (the bootstrap token), ``alice`` and
    ``bob`` (users), and ``api`` (bearer, admin) to compare pages with the API."""

    app: object
    store: Store
    tokens: dict[str, str]

    def session(self, user: str) -> TestClient:
        """A client whose requests carry ``user``'s session cookie (no redirects followed)."""
        client = TestClient(self.app, follow_redirects=False)
        client.cookies.set(SESSION_COOKIE, self.tokens[user])
        return client

    def csrf(self, user: str) -> str:
        return csrf_token(self.tokens[user])

    def bearer(self, user: str = "admin") -> TestClient:
        return TestClient(self.app, headers={"Authorization": f"Bearer {self.tokens[user]}"})


@pytest.fixture
def store(redis_client) -> Store:
    return Store.over(redis_client)


@pytest.fixture
def dash(store, tmp_path) -> Dashboard:
    app = create_app(store, LocalObjectStore(tmp_path / "objects"), AgentTokens(b"secret"),
                     ADMIN_TOKEN)
    tokens = {"admin": ADMIN_TOKEN}
    for name in ("alice", "bob"):
        store.users.add(name, Role.USER)
        tokens[name] = store.users.create_token(name, "test")[0]
    return Dashboard(app, store, tokens)


@dataclass
class Element:
    tag: str
    attrs: dict[str, str | None]
    text: str = ""
    children: list[Element] | None = None

    def find_all(self, tag: str | None = None, **attrs: str) -> list[Element]:
        """Descendants named ``tag`` (any when ``None``) whose attributes include ``attrs``
        (underscores in names stand for dashes; ``True`` matches any value)."""
        wanted = {k.rstrip("_").replace("_", "-"): v for k, v in attrs.items()}
        out = []
        for child in self.children or []:
            if (tag is None or child.tag == tag) and all(
                    k in child.attrs and (v is True or child.attrs[k] == v)
                    for k, v in wanted.items()):
                out.append(child)
            out.extend(child.find_all(tag, **attrs))
        return out

    def find(self, tag: str | None = None, **attrs: str) -> Element:
        found = self.find_all(tag, **attrs)
        assert found, f"no <{tag or '*'} {attrs}>"
        return found[0]


VOID = {"input", "meta", "link", "br", "hr", "img", "col", "source", "wbr"}


def parse(html: str) -> Element:
    """The page as a tree of :class:`Element` (text is each element's whole text, stripped)."""
    from html.parser import HTMLParser

    root = Element("#root", {}, "", [])
    stack = [root]
    texts: list[list[str]] = [[]]

    class Parser(HTMLParser):
        def handle_starttag(self, tag, attrs):
            el = Element(tag, dict(attrs), "", [])
            stack[-1].children.append(el)
            if tag not in VOID:
                stack.append(el)
                texts.append([])

        def handle_endtag(self, tag):
            if tag in VOID:
                return
            while len(stack) > 1:
                el = stack.pop()
                own = "".join(texts.pop())
                el.text = " ".join(own.split())
                texts[-1].append(own)
                if el.tag == tag:
                    break

        def handle_data(self, data):
            texts[-1].append(data)

    p = Parser(convert_charrefs=True)
    p.feed(html)
    p.close()
    return root
