<?php

declare(strict_types=1);

// Autoloading for the tests: Composer's, after `composer install`; else (make
// test, offline, with Debian's phpunit and php-symfony-lock) the client's own
// autoload.php, one for Baton\Tests\, and Debian's autoloader for Symfony Lock.

$root = dirname(__DIR__);
if (is_file($root . '/vendor/autoload.php')) {
    require $root . '/vendor/autoload.php';

    return;
}

require_once $root . '/autoload.php';
spl_autoload_register(static function (string $class) use ($root): void {
    if (str_starts_with($class, 'Baton\\Tests\\')) {
        $file = $root . '/tests/' . str_replace('\\', '/', substr($class, 12)) . '.php';
        if (is_file($file)) {
            require $file;
        }
    }
});

$symfony = '/usr/share/php/Symfony/Component/Lock/autoload.php';
if (is_file($symfony)) {
    require_once $symfony;
}
