"""The machine a study measures on: what it is (:mod:`.host`, the EC2 instance metadata in
:mod:`.instance_metadata`) and what its time costs (:mod:`.pricing`, the catalogue in
``instances.yaml``)."""
