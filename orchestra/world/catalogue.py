"""The world's entity types per OmniGAIA category: numeric/year attributes and typed relations."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType


@dataclass(frozen=True)
class Attr:
    """A numeric attribute: infobox ``label``, question ``noun``, value range, and a prose sentence."""

    key: str
    label: str
    noun: str
    lo: int
    hi: int
    sentence: str
    year: bool = False
    log: bool = False


@dataclass(frozen=True)
class Rel:
    """A relation to an entity of type ``target``; the browsed value is that entity's name."""

    key: str
    label: str
    noun: str
    target: str
    sentence: str


@dataclass(frozen=True)
class EType:
    name: str
    phrase: str
    category: str
    attrs: tuple[Attr, ...]
    rels: tuple[Rel, ...] = ()
    person: bool = False
    variants: tuple[str, ...] = field(default_factory=tuple)


def _year(key: str, label: str, noun: str, lo: int, hi: int, sentence: str) -> Attr:
    return Attr(key, label, noun, lo, hi, sentence, year=True)


def _qty(key: str, label: str, noun: str, lo: int, hi: int, sentence: str, log: bool = False) -> Attr:
    return Attr(key, label, noun, lo, hi, sentence, log=log)


# fmt: off
TYPES: tuple[EType, ...] = (
    EType("city", "city", "Geography & Travel", (
        _qty("population", "Population", "population", 2000, 3_000_000, "It has a population of {v}.", True),
        _year("founded", "Founded", "founding year", 700, 1950, "It was founded in {v}."),
        _qty("elevation_m", "Elevation (m)", "elevation in metres", 2, 2800,
             "It lies {v} metres above sea level."),
    ), variants=("New {}", "Port {}", "{} Falls")),
    EType("mountain", "mountain", "Geography & Travel", (
        _qty("height_m", "Height (m)", "height in metres", 900, 8600, "Its summit is {v} metres high."),
        _year("first_ascent", "First ascent", "year of its first ascent", 1786, 2015,
              "It was first climbed in {v}."),
    ), (Rel("nearest_city", "Nearest city", "nearest city", "city", "The nearest city is {v}."),),
        variants=("Mount {}", "{} Peak")),
    EType("kingdom", "historical kingdom", "History & Society", (
        _year("founded", "Founded", "founding year", 600, 1700, "The kingdom was founded in {v}."),
        _qty("rulers", "Rulers", "number of rulers", 3, 60, "It had {v} rulers in total."),
    ), (Rel("capital", "Capital", "capital", "city", "Its capital was {v}."),),
        variants=("{} Republic", "New {}")),
    EType("historian", "historian", "History & Society", (
        _year("born", "Born", "birth year", 1700, 1990, "The historian was born in {v}."),
        _qty("books", "Books", "number of books written", 2, 40, "They wrote {v} books."),
    ), person=True),
    EType("company", "technology company", "Technology", (
        _year("founded", "Founded", "founding year", 1850, 2020, "The company was founded in {v}."),
        _qty("employees", "Employees", "number of employees", 40, 250_000, "It employs {v} people.", True),
    ), (Rel("headquarters", "Headquarters", "headquarters city", "city", "It is headquartered in {v}."),
        Rel("founder", "Founder", "founder", "engineer", "It was founded by {v}.")),
        variants=("{} Labs", "{} Group")),
    EType("engineer", "engineer", "Technology", (
        _year("born", "Born", "birth year", 1900, 1995, "The engineer was born in {v}."),
        _qty("patents", "Patents", "number of patents", 1, 300, "They hold {v} patents."),
    ), person=True),
    EType("device", "consumer device", "Technology", (
        _year("release_year", "Released", "release year", 1970, 2024, "It was released in {v}."),
        _qty("price_usd", "Price (USD)", "launch price in US dollars", 20, 4000,
             "It launched at {v} US dollars."),
        _qty("weight_g", "Weight (g)", "weight in grams", 50, 3000, "It weighs {v} grams."),
    ), (Rel("maker", "Maker", "maker", "company", "It is made by {v}."),), variants=("{} Pro", "{} Mini")),
    EType("team", "sports team", "Sports", (
        _year("founded", "Founded", "founding year", 1860, 2015, "The club was founded in {v}."),
        _qty("championships", "Championships", "number of championships won", 0, 40,
             "It has won {v} championships."),
        _qty("stadium_capacity", "Stadium capacity", "stadium capacity", 5000, 95_000,
             "Its stadium holds {v} spectators."),
    ), (Rel("home_city", "Home city", "home city", "city", "It plays its home games in {v}."),),
        variants=("{} United", "{} Rovers")),
    EType("athlete", "athlete", "Sports", (
        _year("born", "Born", "birth year", 1950, 2005, "The athlete was born in {v}."),
        _qty("career_goals", "Career goals", "number of career goals", 0, 900,
             "They scored {v} career goals."),
    ), (Rel("team", "Team", "team", "team", "They play for {v}."),), person=True),
    EType("museum", "museum", "Arts & Culture", (
        _year("opened", "Opened", "opening year", 1750, 2020, "The museum opened in {v}."),
        _qty("annual_visitors", "Annual visitors", "number of annual visitors", 10_000, 9_000_000,
             "It receives {v} visitors a year.", True),
    ), (Rel("city", "City", "city", "city", "It is located in {v}."),), variants=("{} Gallery", "{} Annex")),
    EType("painter", "painter", "Arts & Culture", (
        _year("born", "Born", "birth year", 1400, 1990, "The painter was born in {v}."),
        _qty("paintings", "Paintings", "number of paintings", 5, 2000, "They completed {v} paintings.", True),
    ), person=True),
    EType("film", "film", "Movies", (
        _year("release_year", "Released", "release year", 1920, 2024, "The film was released in {v}."),
        _qty("runtime_min", "Runtime (min)", "runtime in minutes", 70, 210, "It runs for {v} minutes."),
        _qty("box_office_musd", "Box office (million USD)", "box office in millions of US dollars", 1, 2500,
             "It grossed {v} million US dollars.", True),
    ), (Rel("director", "Director", "director", "director", "It was directed by {v}."),),
        variants=("{} II", "Return to {}")),
    EType("director", "film director", "Movies", (
        _year("born", "Born", "birth year", 1890, 1995, "The director was born in {v}."),
        _qty("films_directed", "Films directed", "number of films directed", 1, 60,
             "They directed {v} films."),
    ), person=True),
    EType("species", "animal species", "Science & Nature", (
        _qty("lifespan_years", "Lifespan (years)", "lifespan in years", 1, 200,
             "It lives for about {v} years."),
        _qty("mass_kg", "Mass (kg)", "mass in kilograms", 1, 6000,
             "An adult weighs about {v} kilograms.", True),
        _qty("top_speed_kmh", "Top speed (km/h)", "top speed in km/h", 2, 120, "It can reach {v} km/h."),
    ), (Rel("habitat", "Habitat", "habitat mountain", "mountain", "It lives on the slopes of {v}."),),
        variants=("Lesser {}", "Giant {}")),
    EType("mineral", "mineral", "Science & Nature", (
        _year("discovered", "Discovered", "year of discovery", 1500, 2020, "It was first described in {v}."),
        _qty("density_kg_m3", "Density (kg/m3)", "density in kg per cubic metre", 1000, 22_000,
             "Its density is {v} kilograms per cubic metre."),
        _qty("hardness", "Mohs hardness", "Mohs hardness", 1, 10, "It has a Mohs hardness of {v}."),
    ), variants=("Blue {}", "{} Ore")),
    EType("bank", "bank", "Finance & Commerce", (
        _year("founded", "Founded", "founding year", 1600, 2015, "The bank was founded in {v}."),
        _qty("branches", "Branches", "number of branches", 1, 4000, "It operates {v} branches.", True),
        _qty("assets_busd", "Assets (billion USD)", "assets in billions of US dollars", 1, 3000,
             "It holds assets of {v} billion US dollars.", True),
    ), (Rel("headquarters", "Headquarters", "headquarters city", "city", "It is headquartered in {v}."),),
        variants=("{} Capital", "{} Trust")),
    EType("currency", "currency", "Finance & Commerce", (
        _year("introduced", "Introduced", "year of introduction", 1700, 2020, "It was introduced in {v}."),
        _qty("denominations", "Coin denominations", "number of coin denominations", 2, 12,
             "It is minted in {v} coin denominations."),
    ), variants=("New {}", "Gold {}")),
    EType("dish", "dish", "Food & Nutrition", (
        _qty("calories", "Calories per serving", "calories per serving", 90, 1500,
             "A serving has {v} calories."),
        _qty("prep_minutes", "Preparation time (min)", "preparation time in minutes", 5, 480,
             "It takes {v} minutes to prepare."),
    ), (Rel("origin", "Origin", "city of origin", "city", "It originates from {v}."),),
        variants=("{} Soup", "Sweet {}")),
    EType("fruit", "fruit", "Food & Nutrition", (
        _qty("calories_per_100g", "Calories per 100 g", "calories per 100 grams", 15, 350,
             "It has {v} calories per 100 grams."),
        _qty("vitamin_c_mg", "Vitamin C (mg per 100 g)", "vitamin C content in mg per 100 grams", 1, 200,
             "It contains {v} mg of vitamin C per 100 grams."),
    ), variants=("Wild {}", "Red {}")),
)
# fmt: on

TYPES_BY_NAME: dict[str, EType] = {t.name: t for t in TYPES}


@functools.cache
def field_phrases() -> Mapping[str, str]:
    """The knowledge base's field schema as questions name it: each attribute's and relation's noun
    -> its key (``birth year`` -> ``born``), one key per noun."""
    out: dict[str, str] = {}
    for t in TYPES:
        for f in (*t.attrs, *t.rels):
            if out.setdefault(f.noun, f.key) != f.key:
                raise ValueError(f"the field noun {f.noun!r} names both {out[f.noun]!r} and {f.key!r}")
    return MappingProxyType(out)


def types_for(category: str) -> list[EType]:
    return [t for t in TYPES if t.category == category]


def attr_of(etype: str, key: str) -> Attr:
    return next(a for a in TYPES_BY_NAME[etype].attrs if a.key == key)


def rel_of(etype: str, key: str) -> Rel:
    return next(r for r in TYPES_BY_NAME[etype].rels if r.key == key)
