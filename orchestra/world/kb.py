"""The world's knowledge base: generated entities, near-namesake distractors and their wiki pages."""

from __future__ import annotations

import html
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from orchestra.errors import WorldError
from orchestra.world.catalogue import TYPES_BY_NAME, EType, types_for
from orchestra.world.names import make_word, one_letter_variant, slugify

WIKI = "https://world.local/wiki/"


@dataclass
class Entity:
    id: str
    name: str
    type: str
    category: str
    attributes: dict[str, int]
    relations: dict[str, str] = field(default_factory=dict)  # relation key -> entity id
    distractor_of: str | None = None

    @property
    def slug(self) -> str:
        return slugify(self.name)

    @property
    def url(self) -> str:
        return WIKI + self.slug

    @property
    def etype(self) -> EType:
        return TYPES_BY_NAME[self.type]

    def record(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "url": self.url,
            "type": self.type,
            "category": self.category,
            "attributes": self.attributes,
            "relations": self.relations,
            "distractor_of": self.distractor_of,
        }


@dataclass
class KnowledgeBase:
    entities: list[Entity]
    by_id: dict[str, Entity] = field(init=False)
    by_url: dict[str, Entity] = field(init=False)
    by_title: dict[str, Entity] = field(init=False)

    def __post_init__(self) -> None:
        self.by_id = {e.id: e for e in self.entities}
        self.by_url = {e.url: e for e in self.entities}
        self.by_title = {e.name.lower(): e for e in self.entities}
        if len(self.by_url) != len(self.entities) or len(self.by_title) != len(self.entities):
            raise WorldError("knowledge base has duplicate titles or URLs")

    def subjects(self, category: str) -> list[Entity]:
        """Entities a task may be about: real (not distractor) entities of ``category``."""
        return [e for e in self.entities if e.category == category and e.distractor_of is None]

    def namesakes(self, e: Entity) -> list[Entity]:
        """Pages that are near-namesakes of ``e`` (either direction)."""
        return [o for o in self.entities if o.distractor_of == e.id or (e.distractor_of == o.id)]


def _value(rng: np.random.Generator, lo: int, hi: int, log: bool) -> int:
    if log:
        return int(round(math.exp(rng.uniform(math.log(max(lo, 1)), math.log(hi)))))
    return int(rng.integers(lo, hi + 1))


def _name(rng: np.random.Generator, etype: EType) -> str:
    if etype.person:
        return f"{make_word(rng, 2, 2, 6)} {make_word(rng, 2, 3, 8)}"
    return make_word(rng, 2, 3, 8)


def _variant(rng: np.random.Generator, e: Entity) -> str:
    if e.etype.person:
        first, last = e.name.split(" ", 1)
        return f"{first} {one_letter_variant(rng, last)}"
    if e.etype.variants and rng.random() < 0.5:
        pattern = e.etype.variants[int(rng.integers(len(e.etype.variants)))]
        return pattern.format(e.name)
    return one_letter_variant(rng, e.name)


def build_kb(
    rng: np.random.Generator, n_entities: int, categories: list[str], distractor_share: float
) -> KnowledgeBase:
    """``n_entities`` real entities spread evenly over ``categories`` (and their types), then a
    ``distractor_share`` of them get a near-namesake page with its own, different facts."""
    types = [t for c in categories for t in types_for(c)]
    if not types:
        raise WorldError(f"no entity types for categories {categories}")
    per_cat = [[t for t in types if t.category == c] for c in categories]
    slots = [
        per_cat[i % len(categories)][(i // len(categories)) % len(per_cat[i % len(categories)])]
        for i in range(n_entities)
    ]
    taken: set[str] = set()
    entities: list[Entity] = []

    def fresh(etype: EType, name_fn: Any) -> str:
        for _ in range(200):
            name = name_fn()
            if name.lower() not in taken and slugify(name) not in taken:
                taken.update({name.lower(), slugify(name)})
                return name
        raise WorldError(f"cannot find a fresh name for a {etype.name}")

    def attrs(etype: EType) -> dict[str, int]:
        return {a.key: _value(rng, a.lo, a.hi, a.log) for a in etype.attrs}

    for i, etype in enumerate(slots):
        name = fresh(etype, lambda etype=etype: _name(rng, etype))
        entities.append(Entity(f"e{i + 1:05d}", name, etype.name, etype.category, attrs(etype)))
    n_real = len(entities)
    n_dis = int(round(distractor_share * n_real))
    for j, k in enumerate(sorted(rng.choice(n_real, size=n_dis, replace=False).tolist())):
        base = entities[k]
        name = fresh(base.etype, lambda base=base: _variant(rng, base))
        entities.append(
            Entity(f"d{j + 1:05d}", name, base.type, base.category, attrs(base.etype), distractor_of=base.id)
        )
    by_type: dict[str, list[Entity]] = {}
    for e in entities[:n_real]:
        by_type.setdefault(e.type, []).append(e)
    for e in entities:
        for rel in e.etype.rels:
            pool = [o for o in by_type.get(rel.target, []) if o.id != e.id]
            if pool:
                e.relations[rel.key] = pool[int(rng.integers(len(pool)))].id
    return KnowledgeBase(entities)


def kb_from_pages(pages: Iterable[tuple[str, str, Sequence[tuple[str, str]]]]) -> KnowledgeBase:
    """The knowledge base a set of wiki pages written in the world's vocabulary describes: each page
    ``(url, title, facts)`` whose ``Type`` fact names a catalogue type and whose URL is the one the world
    gives its title becomes an entity, its labelled numbers the attributes, its labelled relations
    (a value that is another such page's title) the relations. Other pages are left out: the builtin
    rewriter has no words for them (search and browse still read them)."""
    by_phrase = {t.phrase: t for t in TYPES_BY_NAME.values()}
    kept: list[tuple[str, str, EType, dict[str, str]]] = []
    for url, title, facts in pages:
        labels = dict(facts)
        etype = by_phrase.get(labels.get("Type", ""))
        if etype is not None and url == WIKI + slugify(title):
            kept.append((url, title, etype, labels))
    ids = {title.lower(): f"p{k + 1:05d}" for k, (_, title, _, _) in enumerate(kept)}
    entities = []
    for (_, title, etype, labels), eid in zip(kept, ids.values(), strict=True):
        attrs = {
            a.key: int(labels[a.label]) for a in etype.attrs if labels.get(a.label, "").lstrip("-").isdigit()
        }
        rels = {
            r.key: ids[labels[r.label].lower()] for r in etype.rels if labels.get(r.label, "").lower() in ids
        }
        entities.append(Entity(eid, title, etype.name, labels.get("Category", etype.category), attrs, rels))
    return KnowledgeBase(entities)


def browse_value(kb: KnowledgeBase, url: str, field_key: str) -> int | str:
    """The ground-truth value of ``field_key`` on the page at ``url`` (relation -> the related name)."""
    e = kb.by_url.get(url)
    if e is None:
        raise WorldError(f"no page at {url}")
    if field_key in e.attributes:
        return e.attributes[field_key]
    if field_key in e.relations:
        return kb.by_id[e.relations[field_key]].name
    raise WorldError(f"page {url} has no field {field_key!r}")


def _fmt(v: int) -> str:
    return f"{v:,}" if v >= 10_000 else str(v)


def render_page(kb: KnowledgeBase, e: Entity) -> dict[str, str]:
    """One page record: url, title, snippet, text (plain body) and html."""
    et = e.etype
    article = "an" if et.phrase[0] in "aeiou" else "a"
    first = et.attrs[0]
    snippet = f"{e.name} is {article} {et.phrase} ({e.category}). " + first.sentence.format(
        v=_fmt(e.attributes[first.key])
    )
    prose = [a.sentence.format(v=_fmt(e.attributes[a.key])) for a in et.attrs[1:]]
    rel_lines, rel_html = [], []
    for rel in et.rels:
        if rel.key in e.relations:
            other = kb.by_id[e.relations[rel.key]]
            prose.append(rel.sentence.format(v=other.name))
            rel_lines.append(f"{rel.label}: {other.name}")
            rel_html.append(
                f'<tr><th>{rel.label}</th><td><a href="{other.url}">{html.escape(other.name)}</a></td></tr>'
            )
    hat = [o.name for o in kb.namesakes(e)]
    hatnote = f"Not to be confused with {', '.join(hat)}." if hat else ""
    facts = [f"{a.label}: {e.attributes[a.key]}" for a in et.attrs] + rel_lines
    text = "\n".join(
        [
            e.name,
            *([hatnote] if hatnote else []),
            snippet + " " + " ".join(prose),
            "",
            "Facts",
            f"Type: {et.phrase}",
            f"Category: {e.category}",
            *facts,
        ]
    )
    rows = [f"<tr><th>{a.label}</th><td>{e.attributes[a.key]}</td></tr>" for a in et.attrs] + rel_html
    see_also = "".join(f'<li><a href="{o.url}">{html.escape(o.name)}</a></li>' for o in kb.namesakes(e))
    page = (
        '<!DOCTYPE html>\n<html><head><meta charset="utf-8">'
        f"<title>{html.escape(e.name)} - World Wiki</title></head>\n<body>\n"
        f"<h1>{html.escape(e.name)}</h1>\n"
        + (f'<p class="hatnote">{html.escape(hatnote)}</p>\n' if hatnote else "")
        + f'<p class="snippet">{html.escape(snippet)}</p>\n<p>{html.escape(" ".join(prose))}</p>\n'
        f'<table class="infobox"><tr><th>Type</th><td>{et.phrase}</td></tr>'
        f"<tr><th>Category</th><td>{html.escape(e.category)}</td></tr>{''.join(rows)}</table>\n"
        + (f"<h2>See also</h2><ul>{see_also}</ul>\n" if see_also else "")
        + "</body></html>\n"
    )
    return {"url": e.url, "title": e.name, "snippet": snippet, "text": text, "html": page}


def search_exact(pages_by_title: dict[str, str], query: str) -> str:
    """The world's own search: the URL of the one page whose title equals ``query`` (case-insensitive)."""
    url = pages_by_title.get(" ".join(str(query).split()).lower())
    if url is None:
        raise WorldError(f"no page titled {query!r}")
    return url
