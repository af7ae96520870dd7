"""What a receipt speaks of: the identity of a revision (`revision`), of a repository
(`repoid`, the canonical id; `aliases`, the earlier ids the operator logged as the
same repository, and the hint when evidence sits under another), of an environment
(`environment`, Ledger's own, read without importing torch; `interpreter`, the
`python` a command runs with, asked in a subprocess; `environment_identity`, the
lock files and distributions a package identity covers), and `source`, reading git
for a revision's identity under the plan it is handed (`ledger.plans.governing`
finds and loads that plan and builds the whole identity). Writers, orchestration,
queries and the verdict may import it. It imports the evidence format and, for
`aliases`, the store its entries live in; never the plan, a writer, a server or a
renderer. Importing this
package imports none of its modules: GitPython is loaded by `source` alone, for the
commands that read git."""
