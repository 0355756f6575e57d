<?php

declare(strict_types=1);

// A PSR-4 autoloader for Baton\ (src/), for a box without Composer: copy this
// folder and `require 'path/to/clients/php/autoload.php';`. With Composer,
// vendor/autoload.php does the same.

spl_autoload_register(static function (string $class): void {
    if (str_starts_with($class, 'Baton\\')) {
        $file = __DIR__ . '/src/' . str_replace('\\', '/', substr($class, 6)) . '.php';
        if (is_file($file)) {
            require $file;
        }
    }
});
