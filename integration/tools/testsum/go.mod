module github.com/fencelock/fencelock/integration/tools/testsum

go 1.26.0
