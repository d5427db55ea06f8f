module github.com/fencelock/fencelock/integration

go 1.26.0

replace github.com/fencelock/fencelock => ../
