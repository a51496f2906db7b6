"""The capi-machine-glue operator's identity keeps its marks apart from the other operators'."""

from capi_machine_glue import handlers


def test_identity_names_are_the_operators_own() -> None:
    assert handlers.IDENTITY.finalizer == "capi-machine-glue.capfleet.dev/finalizer"
    assert handlers.IDENTITY.peering_name == "capfleet-capi-machine-glue"
