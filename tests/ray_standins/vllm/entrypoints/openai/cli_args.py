"""Stand-in (see tests/ray_standins/README.md): no frontend arguments are set."""

import dataclasses


@dataclasses.dataclass
class FrontendArgs:
    pass
