from bertkit.cli.main import main

raise SystemExit(main())
