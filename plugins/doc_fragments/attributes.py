# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The words of the attributes the collection's modules share; each module says how far it supports them."""

from __future__ import annotations


class ModuleDocFragment:  # pylint: disable=too-few-public-methods
    """The descriptions of the attributes (DOCUMENTATION), the support of a module that only reads (INFO_MODULE),
    and the description of a module run by an action plugin of the same name (ACTION)."""

    DOCUMENTATION = r"""
attributes:
  check_mode:
    description: Can run in check mode and return changed status prediction without modifying target.
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check mode), when in diff mode.
  idempotent:
    description: When run twice in a row outside check mode, with the same arguments, the second invocation indicates no change.
"""

    INFO_MODULE = r"""
attributes:
  check_mode:
    support: full
    details:
      - The module only reads, so it reports in check mode too.
  diff_mode:
    support: none
  idempotent:
    support: full
"""

    ACTION = r"""
attributes:
  action:
    description: Indicates this has a corresponding action plugin so some parts of the options can be executed on the controller.
    support: full
"""
