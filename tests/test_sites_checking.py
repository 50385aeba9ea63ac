"""A site definition's text checked with each problem at its line (crawlplug.sites.checking):
a YAML syntax error, an unknown key, a wrong type deep under fields, a missing required key,
a cross-check of the keys; what the console's editor and `crawlplug sites check` show."""

from __future__ import annotations

from crawlplug.sites.checking import check_text

from .support.nodes import ROOT

SITES = ROOT / "spiders" / "sites"
STEPS = ("spiders.sitesteps.AddSite",)

CARS = (SITES / "cars.yaml").read_text()


def line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


def test_a_valid_text_checks_as_the_cli_validates_it():
    checked = check_text(CARS, pipelines=STEPS)
    assert checked.valid and checked.errors == []
    assert checked.as_dict() == {
        "valid": True,
        "errors": [],
        "name": "cars",
        "steps": ["brand", "series", "model"],
        "fields": ["name", "brand", "series", "year", "price", "electric", "seats"],
    }


def test_a_yaml_syntax_error_is_at_its_line():
    text = CARS.replace('    prefix: "Price:"', '    prefix: "Price:\n  oops: [')
    checked = check_text(text, pipelines=STEPS)
    assert not checked.valid and len(checked.errors) == 1
    (problem,) = checked.errors
    assert problem.path == "" and problem.message.startswith("not valid YAML/JSON")
    assert problem.line is not None and problem.line >= line_of(text, 'prefix: "Price:')
    broken = "name: cars\nsteps:\n  - name: a\n  - name: [b\n"
    (problem,) = check_text(broken).errors
    assert problem.line == 5 and "not valid YAML/JSON" in problem.message, problem


def test_an_unknown_key_is_at_its_line():
    text = CARS.replace("    suffix: yuan", "    suffix: yuan\n    colour: red")
    (problem,) = check_text(text, pipelines=STEPS).errors
    assert (problem.path, problem.line, problem.column) == ("fields.price.colour", line_of(text, "colour: red"), 5)
    assert problem.message == "Extra inputs are not permitted"
    assert problem.text("cars.yaml") == f"cars.yaml:{problem.line}: fields.price.colour: Extra inputs are not permitted"


def test_a_wrong_type_deep_under_fields_is_at_its_line():
    text = CARS.replace("    type: int\n  electric", "    type: integer\n  electric")
    (problem,) = check_text(text, pipelines=STEPS).errors
    assert problem.path == "fields.price.type" and problem.line == line_of(text, "type: integer")
    # in a flow mapping too: the line of the key, its column
    text = CARS.replace("xpath: \"//div[@class='crumbs']/a[2]/text()\", required: true", 'xpath: "//div", required: 3')
    (problem,) = check_text(text, pipelines=STEPS).errors
    assert problem.path == "fields.brand.required" and problem.line == line_of(text, "required: 3")
    assert problem.column == text.splitlines()[problem.line - 1].index("required") + 1


def test_a_missing_required_key_is_at_its_parent_and_a_cross_check_at_its_key():
    text = CARS.replace("steps:\n", "stops:\n")
    problems = {p.path: p for p in check_text(text, pipelines=STEPS).errors}
    top = line_of(text, "name: cars")  # the document begins after its comments
    assert problems["steps"].line == top and problems["steps"].message == "Field required"
    assert problems["stops"].line == line_of(text, "stops:")
    text = CARS.replace("to: model", "to: modle")
    (problem,) = check_text(text, pipelines=STEPS).errors
    assert problem.path == "steps[1].links[0].to" and problem.line == line_of(text, "to: modle")
    assert "no step named 'modle'" in problem.message
    # a field whose selector is missing: at the field's own key
    text = CARS.replace("  name:     {css: h2.title, required: true}", "  name:     {required: true}")
    (problem,) = check_text(text, pipelines=STEPS).errors
    assert problem.path == "fields.name" and problem.line == line_of(text, "name:     {required")
    assert check_text("- a list").as_dict()["errors"] == [
        {"line": 1, "column": 1, "path": "", "message": "the top level must be a mapping, not list"}
    ]
    assert check_text("").errors[0].line is None
