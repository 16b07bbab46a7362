"""``lore entity``: the people, services, tools, repositories and files a project knows by
name, through the local API (the entity book's rules apply in the route)."""

from __future__ import annotations

import argparse
from typing import Any

from lore_core.cli.api_client import ApiClient, with_client
from lore_core.cli.common import described, entity_ref, print_json, project_of, quoted, when
from lore_core.interfaces import Command


def _entity_line(e: dict[str, Any]) -> str:
    aliases = f"  aka {', '.join(e['aliases'])}" if e["aliases"] else ""
    where = "  [global]" if not e["project"] else ""
    flag = f"  [{e['sensitivity']}]" if e["sensitivity"] != "normal" else ""
    return f"{e['id']}  {e['kind']:<10} {e['name']}{aliases}{where}{flag}"


def cmd_entity(args: argparse.Namespace) -> int:
    def action(client: ApiClient) -> int:
        command = args.entity_command
        for name in ("ref", "target", "keep", "other"):  # e: id prefixes
            if getattr(args, name, None):
                setattr(args, name, entity_ref(client, getattr(args, name)))
        if command == "list":
            rows = client.get("/entities", project=None if args.all else project_of(args))
            if args.json:
                print_json(rows)
            elif not rows:
                print("no entities yet")
            for row in [] if args.json else rows:
                print(_entity_line(row))
            return 0
        if command == "show":
            found = client.get("/entities/show", ref=args.ref, project=project_of(args))
            if args.json:
                print_json(found)
                return 0
            entity = found["entity"]
            print(_entity_line(entity))
            for r in entity["relations"]:
                print(f"  {r['predicate']} {r['target']} {r.get('target_name', '')}".rstrip())
            for r in found["related"]:
                print(f"  {r['source']} {r['source_name']} {r['predicate']} this")
            if found["merged"]:
                print(f"  merged into it: {', '.join(found['merged'])}")
            print(f"  created {when(entity['created_at'])} by {entity['created_by']}, "
                  f"updated {when(entity['updated_at'])} by {entity['updated_by']}")  # fmt: skip
            return 0
        project = {"project": project_of(args)}
        if command == "add":
            fields: dict[str, Any] = {"name": args.name, "kind": args.kind, "aliases": args.alias or []}
            if args.sensitivity:
                fields["sensitivity"] = args.sensitivity
            fields |= {"global": True} if args.is_global or args.scope == "global" else project
            result = _change(client, "add", fields)
        elif command == "alias":
            fields = {"ref": args.ref, "alias": args.alias, "remove": args.remove}
            result = _change(client, "alias", fields | project)
        elif command == "relate":
            fields = {
                "ref": args.ref,
                "predicate": args.predicate,
                "target": args.target,
                "remove": args.remove,
            }
            result = _change(client, "relate", fields | project)
        elif command == "rename":
            result = _change(client, "edit", {"ref": args.ref, "name": args.name} | project)
        elif command == "delete":
            result = _change(client, "delete", {"ref": args.ref} | project)
            if args.json:
                print_json(result)
                return 0
        else:
            result = _change(client, "merge", {"keep": args.keep, "other": args.other} | project)
        if args.json:
            print_json(result)
            return 0
        print(f"{result['status']}: {_entity_line(result['entity'])}")
        return 0

    return with_client(args, action)


def _change(client: ApiClient, action: str, fields: dict[str, Any]) -> Any:
    return client.call("POST", f"/entities/{quoted(action)}", body=fields)


class Entity(Command):
    name = "entity"
    help = (
        "list, show, add, alias, relate, rename, merge or delete entities (e:<id>): the people, "
        "services, tools, repositories and files the project knows by name"
    )
    description, examples = described(name)

    def configure(self, parser: argparse.ArgumentParser) -> None:
        from lore_core.storage.knowledge import SCOPES, SENSITIVITIES

        esub = parser.add_subparsers(dest="entity_command", metavar="ACTION")
        esub.required = True
        ENTITY_KINDS = ("person", "service", "tool", "repository", "file", "other")  # storage.entities
        elist = esub.add_parser("list", help="the project's entities (and global ones)")
        elist.add_argument("--all", action="store_true", help="every project's entities")
        elist.add_argument("--json", action="store_true", help="print JSON")
        eshow = esub.add_parser("show", help="one entity with its aliases and relations")
        eshow.add_argument("ref", help="e:<id> (a merged id shows its survivor) or one of its names")
        eshow.add_argument("--json", action="store_true", help="print JSON")
        eadd = esub.add_parser("add", help="add an entity (a known name gets the new aliases instead)")
        eadd.add_argument("name", help="the canonical name")
        eadd.add_argument("--kind", required=True, choices=ENTITY_KINDS)
        eadd.add_argument("--alias", action="append", help="another name it goes by (repeatable)")
        eadd.add_argument("--sensitivity", default=None, choices=SENSITIVITIES)
        eadd.add_argument("--global", dest="is_global", action="store_true", help="for every project")
        eadd.add_argument(
            "--scope", choices=SCOPES, default=None, help="project (default) or global: the same as --global"
        )
        ealias = esub.add_parser(
            "alias", help="add (or --remove) an alias; one another entity has is refused"
        )
        ealias.add_argument("ref", help="e:<id> or a name")
        ealias.add_argument("alias")
        ealias.add_argument("--remove", action="store_true", help="remove this alias instead")
        erelate = esub.add_parser("relate", help="add (or --remove) a relation: <ref> <predicate> <target>")
        erelate.add_argument("ref", help="e:<id> or a name")
        erelate.add_argument("predicate", help="a word such as depends_on, owns, uses")
        erelate.add_argument("target", help="e:<id> or a name")
        erelate.add_argument("--remove", action="store_true", help="remove this relation instead")
        erename = esub.add_parser("rename", help="another canonical name (the old one stays an alias)")
        erename.add_argument("ref", help="e:<id> or a name")
        erename.add_argument("name")
        emerge = esub.add_parser("merge", help="merge <other> into <keep>: its names and relations move over")
        emerge.add_argument("keep", help="e:<id> or a name: the entity that stays")
        emerge.add_argument("other", help="e:<id> or a name: its id then opens <keep>")
        edelete = esub.add_parser(
            "delete",
            help="remove an entity for good, with the ids merged into it and every relation to it",
            description=(
                "Remove an entity for good: its row, the entities merged into it (their ids opened "
                "it) and every other entity's relations to them. Its names are free again."
            ),
            epilog="example: lore entity delete e:3f2a9c0d1e4b5a67",
        )
        edelete.add_argument("ref", help="e:<id> or a name")
        edelete.add_argument("--json", action="store_true", help="print JSON")
        for p in (elist, eshow, eadd, ealias, erelate, erename, emerge, edelete):
            p.add_argument("--project", default=None, help="the project directory (default: the current one)")
        for p in (eadd, ealias, erelate, erename, emerge):
            p.add_argument("--json", action="store_true", help="print the result as JSON")

    def run(self, args: argparse.Namespace) -> int:
        return cmd_entity(args)
