"""The descriptors of the featurize tests on clusters (a local folder and object storage):
Cu ACSF, radial, narrow and wide angular functions, with derivatives."""

DESCRIPTORS = {
    "acsf": {
        "elements": ["Cu"],
        "r_cut": 4.5,
        "cutoff": "cos",
        "radial": [[0.5, 0.0], [1.0, 2.5]],
        "narrow": [[0.02, 1.0, 1.0, 0.0]],
        "wide": [[0.02, 2.0, -1.0, 0.0]],
    },
    "derivatives": True,
}
